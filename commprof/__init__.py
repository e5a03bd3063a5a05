"""commprof: how GPU-to-GPU communication eats each token of LLM inference.

Importing commprof needs no GPU, driver, torch or cupy: heavy imports happen inside the
functions that need them. The library (:mod:`commprof.api`) is reachable from the package:
``commprof.load``, ``commprof.plan``, ``commprof.predict``, ``commprof.fit``, ``commprof.compare``,
``commprof.checklist``, ``commprof.reference``, ``commprof.import_kineto``; each returns pandas
DataFrames (``load`` and ``import_kineto``: a results dir's tables).
"""
from commprof._version import __version__

_API = ("Results", "load", "plan", "predict", "fit", "compare", "checklist", "reference", "import_kineto")
__all__ = ["__version__", *_API]


def __dir__():
    # tab completion and dir() list the API, though it loads only on first use
    return sorted({*globals(), *__all__})


def __getattr__(name: str):
    # Loaded on first use, so `import commprof` stays light (no pandas) and the package itself
    # imports none of its layers.
    if name in _API:
        import importlib

        return getattr(importlib.import_module("commprof.api"), name)
    raise AttributeError(f"module 'commprof' has no attribute {name!r}")
