"""CUDA sources and their loader (raw P2P probes, one-shot all-reduce): see cuda_ext/README.md."""
