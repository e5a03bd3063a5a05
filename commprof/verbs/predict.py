"""``commprof predict``: each token's time on a box you don't own.

Argument handling and wiring only: the model is :mod:`commprof.analysis.predictmodel`
(:func:`~commprof.analysis.predictmodel.predict_table`, also reached by :func:`commprof.predict`);
this verb writes ``predict.csv``, ``meta.json`` and ``predict.png`` and prints the table.
"""
from __future__ import annotations

from commprof.model.registry import PredictConfig  # noqa: F401 - the flags, declared once

import os

from commprof import results
from commprof.analysis.predictmodel import CSV_COLUMNS, COLUMN_DOCS, COLUMN_KINDS, predict_table
from commprof.model.errors import EXIT_OK
from commprof.views.console import emit, stdout_console
from commprof.views.predict import predict_chart, render_predict
from commprof.analysis.predictserve import (SERVE_COLUMN_DOCS, SERVE_COLUMN_KINDS, SERVE_COLUMNS, ServeAccount,
                                            add_serve_account, serve_line)
from commprof.results.predict import PREDICT_CSV
from commprof.results.moe import read_moe_steps
from commprof.analysis.predictload import load_line, load_spec

PREDICT_CHART = "predict.png"




def write_predict(out_dir: str, rows: list[dict], meta_extra: dict, columns: list[str] = CSV_COLUMNS) -> list[str]:
    """``predict.csv`` and ``meta.json`` (kind predicted, a label per column) into a new dir."""
    results.check_out_dir(out_dir, resume=False)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, PREDICT_CSV)
    results.write_table(path, columns, rows)      # floats to 6 significant digits, as every table
    results.write_meta(out_dir, results.provenance(
        "predict", "predicted", "per-token decode time on boxes not run here: GPU compute modelled from published "
        "specs, communication from each box's own numbers (commprof predict)", status="complete",
        hosts=["modelled: no box"], **meta_extra))
    return [os.path.join(out_dir, results.META_JSON), path]


def run(cfg: PredictConfig, console=None) -> int:
    """``commprof predict``: rows, files, console table and chart; the exit code."""
    more = dict(ep=cfg.ep, ep_comm=cfg.ep_comm, moe_steps=read_moe_steps(cfg.moe_skew) if cfg.moe_skew else None)   # predictmoe.py
    if cfg.concurrency or cfg.qps:       # the load: predictload.py
        more.update(load=load_spec(cfg.concurrency, cfg.qps, cfg.isl, cfg.osl, cfg.chunk, cfg.prefill_steps))
    rows, notes, meta_extra = predict_table(cfg.model, cfg.gpus, cfg.comms, cfg.tps, cfg.batches, cfg.context,
                                            cfg.prompt, cfg.dtype, cfg.weights, cfg.mode, cfg.mem_util,
                                            cfg.calibration, comm_overhead_from=cfg.comm_overhead_from,
                                            sampling=cfg.sampling, **more)
    model_name = meta_extra["model"]["name"]
    columns, extra_lines = meta_extra.get("csv_columns", CSV_COLUMNS), None
    if "load" in more:
        extra_lines = [load_line(r) for r in rows]
    if cfg.serve:       # the fourth account: scheduling, measured by commprof serve
        account = ServeAccount(cfg.serve)
        notes += add_serve_account(rows, account, cfg.prompt)
        columns = columns + SERVE_COLUMNS
        meta_extra.update(serve=account.describe, column_kinds={**meta_extra.get("column_kinds", COLUMN_KINDS),
                                                                **SERVE_COLUMN_KINDS},
                          columns={**meta_extra.get("columns", COLUMN_DOCS), **SERVE_COLUMN_DOCS})
        extra_lines = (extra_lines or []) + [serve_line(r) for r in rows]
    paths = []
    if cfg.out:
        paths = write_predict(cfg.out, rows, meta_extra, columns)
        if cfg.charts:
            paths.append(predict_chart(rows, os.path.join(cfg.out, PREDICT_CHART), results.read_meta(cfg.out)))

    def render(c):
        c = c or stdout_console(170)
        render_predict(rows, notes, model_name, c)
        for line in extra_lines or []:
            c.print(line, soft_wrap=True)

    emit({"rows": rows, **meta_extra}, cfg.as_json, render, paths, console, 170)
    return EXIT_OK
