"""The commprof command line: parse options, call the core, render, map errors to one line."""
from __future__ import annotations

import dataclasses
import errno
import os
import sys
from typing import Optional

import typer
from typer.core import TyperCommand, TyperGroup

from commprof.model.errors import CommprofError, Terminated, UsageError

#: -h is --help on every command.
_CONTEXT = {"help_option_names": ["-h", "--help"]}


def _no_flag_metavar(params):
    """A switch takes no value: its help shows no ``<bool>`` placeholder."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
    return params


class _Command(TyperCommand):
    def get_params(self, ctx):
        return _no_flag_metavar(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx):
        return _no_flag_metavar(super().get_params(ctx))


_HELP = "commprof: GPU interconnect and collective-communication profiler for LLM inference."


def _fail(e: CommprofError):
    typer.echo(f"commprof: error: {e}", err=True)
    raise typer.Exit(e.exit_code)


def _exit_with(fn, *args, **kwargs):
    """Run a verb's ``run(config)``, which returns the exit code; known errors become one line."""
    try:
        code = fn(*args, **kwargs)
    except CommprofError as e:
        _fail(e)
    except KeyboardInterrupt as e:
        if getattr(e, "exit_code", None):       # SIGTERM (errors.Terminated): 143
            raise typer.Exit(e.exit_code) from e
        raise
    raise typer.Exit(code or 0)


def _parse(kind: str | None, value, name: str):
    """A flag's text as its config holds it (``"ints"``: a comma list of whole numbers, ``"list"``: of words)."""
    if kind is None or value is None:
        return value
    if kind == "ints":
        from commprof.model.units import parse_int_list

        return parse_int_list(value, name)
    return [p.strip() for p in str(value).split(",") if p.strip()]


def _typer_param(f, hints):
    """One config field as the typer parameter that declares it: (parameter name, annotation, default)."""
    m = f.metadata["cli"]
    ann = hints[f.name]
    if m["kind"] == "argument":
        if m["many"]:
            ann = Optional[list[str]] if not m["required"] else list[str]
            default = typer.Argument(None if not m["required"] else ..., help=m["help"])
        else:
            default = typer.Argument(... if m["required"] else f.default, help=m["help"])
        return f.name, ann, default
    name = m["decls"][0].lstrip("-").replace("-", "_")
    if m["invert"]:                                    # --no-charts sets charts False
        return name, bool, typer.Option(False, *m["decls"], help=m["help"])
    if m["parse"]:
        ann, shown = str, m["text"]
    else:
        shown = f.default
    if m["required"]:
        shown = ...
    return name, ann, typer.Option(shown, *m["decls"], help=m["help"], metavar=m["metavar"])


def _command(spec):
    """The typer command of one :class:`~commprof.model.spec.VerbSpec`: its flags from its config's
    fields, its body ``run(config)`` through :func:`_exit_with`."""
    import inspect
    import typing

    from commprof.model.spec import FORMATS, cli_fields, load_object

    hints = typing.get_type_hints(spec.config)
    cfields = cli_fields(spec.config)
    params, by_param = [], {}
    for f in cfields:
        pname, ann, default = _typer_param(f, hints)
        by_param[pname] = f
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
    if spec.table:
        params.append(inspect.Parameter("output_format", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                                        default=typer.Option("table", "--format", metavar="|".join(FORMATS),
                                                             help="table (default), or csv or json on stdout "
                                                                  "(machine-readable; every other line goes to stderr).")))

    def command(**given):
        fmt = given.pop("output_format", "table")
        values = {}
        for pname, value in given.items():
            f = by_param[pname]
            m = f.metadata["cli"]
            if m.get("invert"):
                value = not value
            elif m["kind"] == "argument" and m["many"]:
                value = list(value or [])
            else:
                value = _parse(m.get("parse"), value, m["decls"][0]) if m["kind"] == "option" else value
            values[f.name] = value
        if any(f.name == "argv" for f in dataclasses.fields(spec.config)):
            values["argv"] = ["commprof"] + sys.argv[1:]
        try:
            cfg = spec.config(**values)
        except CommprofError as e:
            _fail(e)
        if fmt not in FORMATS:
            _fail(UsageError(f"--format '{fmt}': use {', '.join(FORMATS)}"))
        run = load_object(spec.run)
        if fmt == "table":
            _exit_with(run, cfg)
        from commprof.views.console import tables_as

        with tables_as(fmt):
            _exit_with(run, cfg)

    command.__name__ = spec.name.replace("-", "_")
    command.__doc__ = spec.help
    command.__signature__ = inspect.Signature(params)
    return command


def make_app() -> typer.Typer:
    """The typer app: one command per verb of :data:`commprof.model.registry.VERBS`, in order."""
    from commprof.model import registry

    app_ = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_Group,
                       context_settings=_CONTEXT, help=_HELP)
    for spec in registry.VERBS:
        app_.command(name=spec.name, help=spec.help, context_settings=_CONTEXT, cls=_Command)(_command(spec))
    return app_


def _is(exc: BaseException, name: str) -> bool:
    """Match click's exception classes by name: typer ships click itself or a vendored copy."""
    return any(cls.__name__ == name for cls in type(exc).__mro__)


#: OSErrors of a file system that refuses a write (full, over quota, read-only, failing, too big).
_DISK_ERRNOS = {getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EROFS", "EIO", "EFBIG") if hasattr(errno, n)}


app = make_app()


def _sigterm_as_interrupt() -> None:
    """SIGTERM (``kill PID``, a scheduler's stop, the only way to stop a run started with ``nohup ...
    &``, which ignores Ctrl-C) raises :class:`Terminated`: every verb then ends as on Ctrl-C, what it
    measured written and its meta.json marked, exit 143; without it Python dies at once and a
    results dir is left "running" with its finished levels or cells unwritten."""
    import signal

    def handler(signum, frame):
        raise Terminated()

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:          # not the main thread (commprof's CLI called from a thread)
        pass


def _wrapped_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM (:class:`Terminated`) inside an exception Python raised around it.

    A signal handler raises wherever the main thread is. Python 3.11 wraps what a class body's
    ``__set_name__`` raises in a RuntimeError, so SIGTERM arriving while a verb's module is still
    being imported (torchrun stopping a sibling rank) would otherwise read as an unexpected error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def main():
    """Console entry: every failure, flag errors included, ends as one line and an exit code."""
    debug = os.environ.get("COMMPROF_DEBUG") == "1"
    if len(sys.argv) == 1:
        sys.argv.append("--help")
    _sigterm_as_interrupt()
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt as e:      # Ctrl-C (130), or SIGTERM (errors.Terminated: 143)
        code = getattr(e, "exit_code", 130)
    except Exception as e:  # noqa: BLE001 - unknown failures still get one line
        if _is(e, "UsageError"):
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else "commprof"
            msg = " ".join(e.format_message().split())
            typer.echo(f"commprof: error: {msg} (see '{where} --help')", err=True)
            sys.exit(2)
        if _is(e, "Abort"):
            code = getattr(e.__cause__, "exit_code", 130)     # click wraps a KeyboardInterrupt in Abort
        elif (stop := _wrapped_interrupt(e)) is not None:
            code = getattr(stop, "exit_code", 130)
        elif isinstance(e, OSError) and e.filename and not debug:
            # A file the core did not expect to fail (a full disk under a chart): name it.
            target = f"'{e.filename}'" + (f" -> '{e.filename2}'" if e.filename2 else "")
            typer.echo(f"commprof: error: {target}: {e.strerror or e} (COMMPROF_DEBUG=1 shows the traceback)",
                       err=True)
            sys.exit(2)
        elif isinstance(e, OSError) and e.errno in _DISK_ERRNOS and not debug:
            # The same without a file name (a library's own write): still exit 2, with the reason.
            typer.echo(f"commprof: error: cannot write a file: {e.strerror or os.strerror(e.errno)} "
                       "(COMMPROF_DEBUG=1 shows the traceback)", err=True)
            sys.exit(2)
        else:
            if debug:
                raise
            msg = (str(e).strip().splitlines() or [""])[0]
            typer.echo(f"commprof: error: unexpected {type(e).__name__}: {msg} "
                       "(COMMPROF_DEBUG=1 shows the traceback)", err=True)
            sys.exit(70)
    if code == 130:
        typer.echo("commprof: interrupted; rows written so far are kept", err=True)
    elif code == 143:
        typer.echo("commprof: terminated (SIGTERM); any ranks were stopped, rows written so far are kept",
                   err=True)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
