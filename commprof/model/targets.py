"""Rank bodies are named by string (``"module:function"``), so the launcher never imports the
rank-side code (``microbench``) and a spawned process imports only what its body needs."""
from __future__ import annotations


def resolve_target(target: str):
    """The function a ``"module:function"`` string names."""
    import importlib

    mod, _, name = target.partition(":")
    return getattr(importlib.import_module(mod), name)
