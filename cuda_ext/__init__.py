"""CUDA kernels built at first use (raw P2P probes, one-shot all-reduce) and their host side.

See cuda_ext/README.md. Importing this package (or any module in it) needs no CUDA, cupy, torch or
numpy: ``cuda_ext.loader`` builds and loads the kernels, ``cuda_ext.probes`` runs the link probes,
``cuda_ext.oneshot`` holds the one-shot all-reduce's limits, P2P rule and launcher.
"""
