"""What measures on this machine: the rank launcher and its watchdog, NVML, the HTTP load client
and ``/metrics`` scrapes of ``commprof serve``."""
