"""The fourth account of ``commprof predict --serve DIR``: scheduling, measured by ``commprof serve``.

The modelled rows say what a decode step costs; a ``serve`` dir (``serve_levels.csv`` and
``meta.json``, written by ``commprof serve`` against the real box, or the same model on another
box) says what the requests saw: time queued before the engine ran them, time to first token
under load and the served time per output token. Each predict row gets the measured figures of
the closed-loop level whose concurrency equals its batch (else the first closed-loop level, and
the row says which), beside the modelled ones, with the modelled / served ratios. Every column
added here is *measured*; ``meta.json`` names the dir. Only the standard library is imported.
"""
from __future__ import annotations

import os

from commprof import results
from commprof.model.errors import UsageError, shown
from commprof.model.units import finite_float as _num
from commprof.results.meta import require_results_dir, shown_path

#: The columns ``--serve`` adds to predict.csv, each measured (the ratios compare modelled / measured).
SERVE_COLUMNS = ["serve_level", "serve_concurrency", "serve_match", "served_queue_ms_mean", "served_ttft_ms_p50",
                 "served_tpot_ms_p50", "tpot_modelled_vs_served", "ttft_modelled_vs_served"]
SERVE_COLUMN_KINDS = {"serve_level": "measured", "serve_concurrency": "measured", "serve_match": "measured",
                      "served_queue_ms_mean": "measured", "served_ttft_ms_p50": "measured",
                      "served_tpot_ms_p50": "measured", "tpot_modelled_vs_served": "predicted / measured",
                      "ttft_modelled_vs_served": "predicted / measured"}
SERVE_COLUMN_DOCS = {
    "serve_match": "'batch' when the serve level's concurrency equals the row's batch, else 'first closed level'",
    "served_queue_ms_mean": "mean time a request waited in the engine's queue at that level (the engine's own metric)",
    "served_ttft_ms_p50": "median time to first token the client saw at that level (queue + prefill + first step)",
    "served_tpot_ms_p50": "median time per output token the client saw at that level",
    "tpot_modelled_vs_served": "ms_per_token / served_tpot_ms_p50 (1.0: the model's step matches the served one)",
    "ttft_modelled_vs_served": "ttft_ms / served_ttft_ms_p50 (needs --prompt; queueing is in the served figure only)",
}


class ServeAccount:
    """The closed-loop levels of one ``commprof serve`` dir."""

    def __init__(self, path: str):
        require_results_dir(path)
        meta = results.read_meta(path)
        if meta.get("verb") != "serve":
            raise UsageError(f"--serve {shown(path)}: not a dir written by commprof serve "
                             f"(its meta.json says verb {shown(meta.get('verb'))})")
        levels_csv = os.path.join(path, "serve_levels.csv")
        if not os.path.exists(levels_csv):
            raise UsageError(f"--serve {shown(path)}: no serve_levels.csv (the serve run wrote no level)")
        _, rows = results.read_table_rows(levels_csv, ("level", "mode", "concurrency", "status", "tpot_ms_p50"))
        self.levels = [r for r in rows if r["mode"] == "closed" and r["status"] == "complete"
                       and _num(r["tpot_ms_p50"]) is not None]
        if not self.levels:
            raise UsageError(f"--serve {shown(path)}: no complete closed-loop level with a TPOT in serve_levels.csv")
        self.path = path
        self.meta = meta
        self.describe = {"dir": shown_path(path), "kind": "measured", "verb": "serve",
                         "label": meta.get("label"), "url": meta.get("url"), "model": meta.get("model"),
                         "hosts": meta.get("hosts"), "gpus": meta.get("gpus"), "start_time": meta.get("start_time"),
                         "prompt_tokens": meta.get("prompt_tokens"), "output_tokens": meta.get("output_tokens"),
                         "queue_time": meta.get("queue_time"),
                         "levels": [int(r["level"]) for r in self.levels]}

    def level_for(self, batch: int) -> tuple[dict, str]:
        for r in self.levels:
            if _num(r["concurrency"]) == batch:
                return r, "batch"
        return self.levels[0], "first closed level"


def add_serve_account(rows: list[dict], account: ServeAccount, prompt: int | None) -> list[str]:
    """Add :data:`SERVE_COLUMNS` to every row in place; notes on what the comparison assumes."""
    for row in rows:
        lv, match = account.level_for(int(row["batch"]))
        tpot, ttft = _num(lv.get("tpot_ms_p50")), _num(lv.get("ttft_ms_p50"))
        modelled_ttft = _num(row.get("ttft_ms"))
        row.update({
            "serve_level": int(lv["level"]), "serve_concurrency": int(float(lv["concurrency"])), "serve_match": match,
            "served_queue_ms_mean": _num(lv.get("queue_ms_mean")) if lv.get("queue_ms_mean") else "",
            "served_ttft_ms_p50": ttft if ttft is not None else "", "served_tpot_ms_p50": tpot,
            "tpot_modelled_vs_served": row["ms_per_token"] / tpot if tpot else "",
            "ttft_modelled_vs_served": modelled_ttft / ttft if ttft and modelled_ttft is not None else "",
        })
    notes = []
    served_prompt = account.meta.get("prompt_tokens")
    if prompt and served_prompt and int(served_prompt) != int(prompt):
        notes.append(f"--serve {account.describe['dir']}: its requests had {served_prompt} prompt tokens, --prompt "
                     f"is {prompt}: the TTFT ratio compares different prompts")
    notes.append(f"--serve {account.describe['dir']}: measured by commprof serve"
                 + (f" ({account.meta.get('label')})" if account.meta.get("label") else "")
                 + f", model {account.meta.get('model')!r}; the served figures include the engine's scheduling, "
                 "the modelled ones do not")
    return notes


def serve_line(r: dict) -> str:
    """The scheduling account of one row, in words (measured beside modelled); a row read back
    from predict.csv has NaN where the row was empty."""
    def has(k) -> bool:
        return _num(r.get(k)) is not None

    def f(k, nd=2):
        return f"{_num(r.get(k)):.{nd}f}" if has(k) else "-"

    queue = f"queue {f('served_queue_ms_mean')} ms, " if has("served_queue_ms_mean") else ""
    ttft = (f", TTFT {f('served_ttft_ms_p50', 1)} ms served vs {f('ttft_ms', 1)} ms modelled"
            if has("ttft_modelled_vs_served") else
            f", TTFT {f('served_ttft_ms_p50', 1)} ms served" if has("served_ttft_ms_p50") else "")
    return (f"{r['gpu']} TP={r['tp']} batch {r['batch']}: served (measured, level {int(r['serve_level'])}, concurrency "
            f"{int(r['serve_concurrency'])}, {r['serve_match']}): {queue}TPOT {f('served_tpot_ms_p50')} ms vs "
            f"{f('ms_per_token')} ms/token modelled (x{f('tpot_modelled_vs_served')}){ttft}")
