"""What every verb that starts ranks (sweep, trace, moe) shares in its config: the backend and
why, the watchdog's timeout, the results dir, progress, the command line, the world size and how
the ranks were launched. Model layer: the standard library only."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


#: The most repeats ``--repeat`` takes (sweep, trace: each one walks every cell again).
MAX_REPEAT = 100


@dataclass(kw_only=True)
class RunConfig:
    #: the verb that runs this config: labels the progress bar and the errors.
    VERB: ClassVar[str] = ""
    backend: str = "gloo"
    backend_reason: str = ""
    timeout_s: float = 120.0
    out_dir: str = ""
    progress: bool = False
    argv: list[str] = field(default_factory=list)
    world_size: int = 0
    launch: str = "local"            # "local" (commprof starts the ranks) or "torchrun"
