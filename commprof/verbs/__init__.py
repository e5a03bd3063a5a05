"""One module per verb: its config dataclass and ``run(config) -> exit code``. Verbs are leaves:
none imports another (``.importlinter``)."""
