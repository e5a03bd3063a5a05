"""``commprof import KIND FILE...``: another tool's output as a commprof results dir, by kind:
``nccl-tests`` logs (:mod:`commprof.ingest.nccltests`, a sweep dir), ``nvidia-smi-topo`` text
(:mod:`commprof.ingest.smitopo`, a topo.json) or ``kineto`` traces of a serving engine
(:mod:`commprof.ingest.kineto`, a trace dir)."""
from __future__ import annotations

from commprof.model.registry import ImportConfig  # noqa: F401 - the flags, declared once

import os
import sys
from datetime import datetime

from commprof import results
from commprof.model.errors import UsageError, EXIT_CHECK_FAILED, EXIT_INSUFFICIENT_EVIDENCE
from commprof.ingest.nccltests import EXIT_WRONG_RESULTS, import_nccl_tests, wrong_summary
from commprof.results.meta import check_writable
from commprof.model.registry import IMPORT_KINDS, import_kind
from commprof.model.spec import load_object
from commprof.ingest.nccldebug import import_nccl_debug
from commprof.results.nccldebug import NCCL_COMMS_CSV, NCCL_VERDICT_CSV
from commprof.views.nccldebug import account_lines
from commprof.ingest.ncclinspector import import_nccl_inspector
from commprof.results.ncclinspector import NCCL_INSPECTOR_COMMS_CSV, NCCL_INSPECTOR_CSV
from commprof.views.ncclinspector import inspector_lines


def default_import_dir(kind: str, root: str = results.RUNS_DIR) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, f"{stamp}-import-{kind}")




def run(cfg: ImportConfig) -> int:
    """``commprof import KIND FILE...``: the exit code; ``out`` is checked writable first."""
    if cfg.out is not None:
        try:
            check_writable(cfg.out)
        except UsageError as e:
            raise UsageError(f"--out: {e}") from None
    if cfg.label is not None and not cfg.label.strip():
        raise UsageError("--label '': give the box a name (e.g. --label 'A100 DGX')")
    spec = import_kind(cfg.kind)
    if cfg.label is not None and spec is not None and not spec.label:
        takers = [k.name for k in IMPORT_KINDS if k.label]
        raise UsageError(f"import {cfg.kind}: --label is for {' and '.join(repr('import ' + t) for t in takers)}")
    out = cfg.out or default_import_dir(cfg.kind)
    for f, v in (("--expect-gpus", cfg.expect_gpus), ("--expect-nodes", cfg.expect_nodes)):
        if v is not None and v < 1:
            raise UsageError(f"{f} {v}: give a count of 1 or more")
    rc = _dispatch(cfg.kind, list(cfg.paths), out, step_marker=cfg.step_marker, model=cfg.model, tp=cfg.tp,
                   expect_gpus=cfg.expect_gpus, expect_nodes=cfg.expect_nodes)
    # the label is kept wherever the dir was written (an nccl-debug account that FAILs an item is written too)
    if cfg.label and (rc == 0 or os.path.exists(os.path.join(out, results.META_JSON))):
        meta = results.read_meta(out)
        meta["label"] = cfg.label.strip()
        results.write_meta(out, meta)
    return rc


_FLAG = {"step_marker": "--step-marker", "model": "--model", "tp": "--tp", "expect_gpus": "--expect-gpus",
         "expect_nodes": "--expect-nodes"}


def _dispatch(kind: str, paths, out: str, **options) -> int:
    """One importer of :data:`commprof.model.registry.IMPORT_KINDS` by ``kind``: import, print one
    line, return the exit code. An option the kind does not take is refused, naming the kinds that do."""
    spec = import_kind(kind)
    if spec is None:
        raise UsageError(f"import: unknown kind '{kind}' (known: {', '.join(k.name for k in IMPORT_KINDS)})")
    given = [k for k, v in options.items() if v is not None]
    extra = [_FLAG.get(k, k) for k in given if k not in spec.options]
    if extra:
        takers = [k.name for k in IMPORT_KINDS if set(given) & set(k.options)]
        raise UsageError(f"import {kind}: {', '.join(extra)} {'is' if len(extra) == 1 else 'are'} for "
                         f"{' and '.join(repr('import ' + t) for t in takers)} only; drop it")
    importer = load_object(spec.importer)          # each importer loads only when asked for
    return importer(list(paths), out or default_import_dir(kind),
                    **{k: v for k, v in options.items() if k in spec.options})


def import_nccl_tests_dir(paths, out_dir: str) -> int:
    """``commprof import nccl-tests``: the logs as a sweep dir, one line saying what came in; exit
    code 1 (EXIT_WRONG_RESULTS) when a log reports wrong results."""
    import_nccl_tests(list(paths), out_dir)
    rows = results.read_rows(out_dir)
    ops = sorted({r["op"] for r in rows})
    tps = sorted({int(r["tp"]) for r in rows})
    modes = sorted({r["mode"] for r in rows})
    unchecked = sum(r.get("status") == "unchecked" for r in rows)
    deviation = int(results.read_meta(out_dir).get("unchecked_deviation_rows") or 0)
    print(f"imported {len(rows)} rows ({', '.join(ops)}; tp {', '.join(map(str, tps))}; "
          f"{', '.join(modes)}) from {len(paths)} file(s) into {out_dir}"
          + (f"; correctness not checked in {unchecked - deviation} rows (#wrong N/A: validation off)"
             if unchecked > deviation else "")
          + (f"; correctness not known in {deviation} rows (an old-layout 'error' column, a deviation, and no "
             "'# Out of bounds values' footer in the log to judge it)" if deviation else ""))
    bad = wrong_summary(out_dir)
    if bad:
        print(f"commprof: error: {bad}", file=sys.stderr)
        return EXIT_WRONG_RESULTS
    return 0


def import_nccl_debug_dir(paths, out: str, expect_gpus=None, expect_nodes=None) -> int:
    """``import nccl-debug``: the account, its lines, and the exit code (9: no NCCL line at all;
    8: an item FAILed; 0 otherwise)."""
    meta = import_nccl_debug(paths, out, expect_gpus=expect_gpus, expect_nodes=expect_nodes)
    _, comms = results.read_table_rows(os.path.join(out, NCCL_COMMS_CSV))
    _, items = results.read_table_rows(os.path.join(out, NCCL_VERDICT_CSV))
    for line in account_lines(meta, comms, items):
        print(line)
    print(f"imported {len(paths)} NCCL_DEBUG log(s) into {out}")
    if not meta["nccl_debug"]["nccl_lines"]:
        empty = "" if meta["nccl_debug"].get("lines") else f" (the file{'s are' if len(paths) > 1 else ' is'} empty)"
        print(f"commprof: error: no NCCL INFO line in {', '.join(paths)}{empty}: run the engine with NCCL_DEBUG=INFO "
              "(docs/nccl-debug.md)", file=sys.stderr)
        return EXIT_INSUFFICIENT_EVIDENCE
    return EXIT_CHECK_FAILED if any(it["verdict"] == "FAIL" for it in items) else 0


def import_nccl_inspector_dir(paths, out: str) -> int:
    """``import nccl-inspector``: the engine's collectives, one line per communicator, and the exit
    code (9: no Inspector record in the files; 0 otherwise)."""
    meta = import_nccl_inspector(paths, out)
    _, comms = results.read_table_rows(os.path.join(out, NCCL_INSPECTOR_COMMS_CSV))
    _, rows = results.read_table_rows(os.path.join(out, NCCL_INSPECTOR_CSV))
    for line in inspector_lines(meta, comms, rows):
        print(line)
    info = meta["nccl_inspector"]
    print(f"imported {info['records']:,} NCCL Inspector record(s) from {info['files']} file(s) into {out}")
    if not info["records"]:
        print(f"commprof: error: no NCCL Inspector record in {', '.join(paths)}: run the engine with "
              "NCCL_PROFILER_PLUGIN=<libnccl-profiler-inspector.so> NCCL_INSPECTOR_ENABLE=1 (docs/nccl-debug.md)",
              file=sys.stderr)
        return EXIT_INSUFFICIENT_EVIDENCE
    return 0
