"""A trace results dir: ``trace_tokens.csv`` (per tp, batch, mode, token, rank), ``trace_layers.csv``
(per layer and rank, with straggler counts), ``trace_summary.csv`` (one row per run) and
``meta.json``. Rank 0 (or ``trace --predict``) appends one attributed run at a time."""
from __future__ import annotations

import os

from ..runinfo import now_iso
from .meta import check_out_dir, finish_meta, provenance, rank_fields, write_meta
from .table import TableAppender


TOKENS_CSV = "trace_tokens.csv"


LAYERS_CSV = "trace_layers.csv"


SUMMARY_CSV = "trace_summary.csv"


TOKEN_COLUMNS = ["kind", "scaled", "layers_run", "layers_model", "tp", "batch", "mode", "token", "rank",
                 "latency_us", "compute_us", "transfer_us", "wait_us", "gaps_us", "residual_us",
                 "comm_share_pct", "latency_us_measured"]


LAYER_COLUMNS = ["kind", "tp", "batch", "mode", "layer", "rank", "compute_us", "transfer_us", "wait_us",
                 "comm_share_pct", "straggler_count", "collectives"]


SUMMARY_COLUMNS = ["kind", "scaled", "tp", "batch", "mode", "ms_per_token", "tokens_per_s",
                   "collectives_per_step", "collectives_per_token", "comm_share_pct", "transfer_share_pct",
                   "wait_share_pct", "compute_ms", "transfer_ms", "wait_ms", "gaps_ms", "max_residual_pct",
                   "tokens", "layers_run", "layers_model"]


class TraceWriter:
    """Rank 0's handle on a trace results dir: rows appended one run at a time."""

    def __init__(self, cfg, meta: dict, kind: str = "measured"):
        self.cfg, self.meta, self.kind = cfg, meta, kind
        p = cfg.out_dir
        self.tokens = TableAppender(os.path.join(p, TOKENS_CSV), TOKEN_COLUMNS)
        self.layers = TableAppender(os.path.join(p, LAYERS_CSV), LAYER_COLUMNS)
        self.summary = TableAppender(os.path.join(p, SUMMARY_CSV), SUMMARY_COLUMNS)

    def add_attributed(self, tp, batch, mode, att):
        """Append one run (``commprof.attribution.attribute_run``) to the three tables."""
        common = {"kind": self.kind, "tp": tp, "batch": batch, "mode": mode}
        self.tokens.write([{**common, "scaled": int(att["scaled"]), "layers_run": att["layers_run"],
                            "layers_model": self.cfg.layers_model, **r} for r in att["tokens"]])
        self.layers.write([{**common, **r} for r in att["layers"]])
        self.summary.write([{**common, "scaled": int(att["scaled"]), "layers_run": att["layers_run"],
                             "layers_model": self.cfg.layers_model, **att["summary"]}])

    def close(self, status: str = "complete"):
        for c in (self.tokens, self.layers, self.summary):
            c.close()
        finish_meta(self.cfg.out_dir, status)


def open_trace(cfg, rank_infos: list[dict], kind: str = "measured", extra: dict | None = None):
    """Create the results dir and its ``meta.json`` (provenance), return the writer."""
    check_out_dir(cfg.out_dir, resume=False)
    os.makedirs(cfg.out_dir, exist_ok=True)
    what = ("per-token decode latency split into compute / transfer / wait / gaps (commprof trace)"
            if kind == "measured" else
            "predicted per-token decode latency: compute measured here + collective latency from another box")
    meta = provenance(
        "trace", kind, what, command=cfg.argv,
        runs=[{"start_time": now_iso(), "command": cfg.argv, "status": "running"}],
        backend=cfg.backend, backend_reason=cfg.backend_reason, launch=cfg.launch,
        **rank_fields(rank_infos),
        model=cfg.model, scaled=cfg.scaled,
        scaling=(f"{cfg.layers} of {cfg.layers_model} layers ran; per-layer parts scaled by "
                 f"{cfg.layers_model}/{cfg.layers}" if cfg.scaled else "all layers ran"),
        engine_approximations=["random weights", "MLA attention runs as grouped-query attention",
                               "an MoE MLP runs as a dense MLP as wide as the active experts",
                               "Gemma extra norms and soft-capping left out"],
        memory=cfg.memory, config=cfg.to_dict(),
        columns={"transfer_us": "per collective, the minimum duration over the group's ranks",
                 "wait_us": "own duration of the collective minus the transfer (arrival skew)",
                 "gaps_us": "time in the token covered by no segment (host/launch overhead)",
                 "residual_us": "latency - (compute + transfer + wait + gaps)",
                 "straggler_count": "collectives of that layer for which this rank arrived last"},
    )
    meta.update(extra or {})
    write_meta(cfg.out_dir, meta)
    return TraceWriter(cfg, meta, kind)
