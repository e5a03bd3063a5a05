"""commprof: how GPU-to-GPU communication eats each token of LLM inference.

Importing commprof needs no GPU, driver, torch or cupy: heavy imports happen inside the
functions that need them.
"""
__version__ = "0.1.0"
