"""How a verb is declared once: its flags as fields of its config dataclass (:func:`flag`,
:func:`arg`), and one :class:`VerbSpec` per verb in :mod:`commprof.model.registry` that the CLI,
``show``, ``load``, ``report``, ``import`` and the import-linter test all read.

Pure data and the standard library only: ``commprof --help`` reads it without loading a verb."""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any

#: Output formats of a verb that prints a table (``--format``): the default, then the machine ones.
FORMATS = ("table", "csv", "json")


def flag(default: Any = MISSING, *decls: str, help: str, parse: str | None = None, text: Any = MISSING,
         invert: bool = False, metavar: str | None = None, required: bool = False):
    """One option of a verb, declared on its config field. ``decls`` are the option names
    (``"--tp"``); ``text`` is the default the command line shows where the field holds it parsed
    (``parse``: ``"ints"`` for a comma list of whole numbers, ``"list"`` for a comma list of words);
    ``invert`` for a ``--no-X`` switch that sets the field False; ``required`` for an option with
    no default."""
    cli = {"kind": "option", "decls": decls, "help": help, "parse": parse, "text": text, "invert": invert,
           "metavar": metavar, "required": required}
    if isinstance(default, (list, dict)):      # a mutable default: each config gets its own copy
        return field(default_factory=lambda d=default: type(d)(d), metadata={"cli": cli})
    return field(default=None if required else default, metadata={"cli": cli})


def arg(*, help: str, required: bool = True, many: bool = False, default: Any = MISSING):
    """One positional argument of a verb (``many``: one or more, a list)."""
    cli = {"kind": "argument", "help": help, "required": required, "many": many}
    if many:
        return field(default_factory=list, metadata={"cli": cli})
    return field(default=None if default is MISSING else default, metadata={"cli": cli})


@dataclass(frozen=True)
class ResultKind:
    """One kind of result a dir can hold: its tables (file name -> (key in ``Results.tables``,
    required columns)), its JSON documents (file name -> key in ``Results.docs``), and the view
    that shows it again (``"module:function"``, called as ``fn(res, charts=, echo=, note=)``,
    returns whether it showed something). ``show`` calls the views in registry order."""
    name: str
    tables: dict = field(default_factory=dict)
    docs: dict = field(default_factory=dict)
    view: str | None = None


@dataclass(frozen=True)
class VerbSpec:
    """One verb: ``config`` (a dataclass whose :func:`flag`/:func:`arg` fields are its flags),
    ``run`` (``"module:function"``, called with the config, returns the exit code), the result
    kinds it writes, the report section that reads them, and whether it prints a table
    (``--format``). ``help`` is the command's one paragraph in ``commprof --help``."""
    name: str
    config: type
    run: str
    help: str
    kinds: tuple = ()
    report_section: str | None = None
    table: bool = False

    @property
    def module(self) -> str:
        return self.run.split(":")[0]


@dataclass(frozen=True)
class ImportKind:
    """One ``commprof import`` kind: the importer ``"module:function"`` called as
    ``fn(paths, out, **options)``, the kind-only options it takes, and its help."""
    name: str
    importer: str
    help: str
    options: tuple = ()
    label: bool = False         # takes --label (the box's short name)


def cli_fields(config: type) -> list:
    """The fields of ``config`` that are command-line flags or arguments, in order."""
    from dataclasses import fields

    return [f for f in fields(config) if "cli" in f.metadata]


def load_object(ref: str):
    """``"package.module:name"`` -> the object (imported only now)."""
    import importlib

    mod, _, name = ref.partition(":")
    return getattr(importlib.import_module(mod), name)
