"""What reads other tools' files into results dirs: nccl-tests logs, ``nvidia-smi topo`` text,
PyTorch-profiler (Kineto) traces, Prometheus ``/metrics`` text."""
