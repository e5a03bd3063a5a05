"""Each token's latency split into compute and communication, from per-segment stamps of every rank.

Per token and rank:

* compute: the engine's compute segments;
* transfer: for each collective, the *minimum* duration over the group's ranks (the rank that
  arrived last waits least; its duration is the collective itself);
* wait: the rank's own duration of that collective minus the transfer (arrival skew);
* gaps: time inside the token covered by no segment (host and launch overhead);
* residual: token latency minus the four (should be ~0; reported, not hidden).

The last-arriving rank of a collective is its straggler. With fewer layers run than the model
has, the per-layer parts are scaled to the full depth and every row says so. Pure functions over
numbers: no torch, no files.
"""
from __future__ import annotations

from commprof.results.trace import trace_us


def attribute(recs: list[dict], layers_model: int, tp: int | None = None) -> dict:
    """Per token and rank: compute/transfer/wait/gaps/residual (us), scaled to the model's depth
    when fewer layers ran; per layer and rank: means over tokens and straggler counts.

    At tp=1 no collective runs: the (empty) collective segments count as gaps."""
    import numpy as np

    recs = sorted(recs, key=lambda r: r["rank"])
    segs = recs[0]["segments"]
    no_comm = (tp or len(recs)) == 1
    comm = np.array([s.is_comm and not no_comm for s in segs])
    layer_of = np.array([s.layer for s in segs])
    in_layer = layer_of >= 0
    n_layers_run = int(layer_of.max()) + 1 if in_layer.any() else 0
    scale = layers_model / n_layers_run if n_layers_run else 1.0
    lat = np.stack([r["lat"] for r in recs])              # (R, T)
    offs = np.stack([r["offs"] for r in recs])            # (R, T, S)
    durs = np.stack([r["durs"] for r in recs])            # (R, T, S)
    R, T, S = durs.shape
    transfer = np.where(comm, np.broadcast_to(durs.min(axis=0), durs.shape), 0.0)   # (R, T, S), same for all r
    wait = np.where(comm, durs - transfer, 0.0)
    compute = np.where(comm, 0.0, durs)
    # the straggler at the resolution trace.json records (1 ns): a tie goes to the lower rank, here and
    # in the import of that file alike
    straggler = np.vectorize(trace_us)(durs).argmin(axis=0)                    # (T, S) rank index
    ends = offs + durs
    gaps_between = np.concatenate([offs[:, :, :1], offs[:, :, 1:] - ends[:, :, :-1]], axis=2)
    trailing = lat - ends[:, :, -1]

    def split(a):
        """(non-layer sum, layer sum) over segments, per rank and token."""
        return (a * ~in_layer).sum(-1), (a * in_layer).sum(-1)

    out = {}
    parts = {}
    for name, arr in (("compute_us", compute), ("transfer_us", transfer), ("wait_us", wait),
                      ("gaps_us", gaps_between)):
        outer, inner = split(arr)
        if name == "gaps_us":
            outer = outer + trailing
        parts[name] = outer + inner * scale
    latency = lat + (scale - 1.0) * sum(split(a)[1] for a in (compute, transfer, wait, gaps_between))
    residual = latency - sum(parts.values())
    comm_us = parts["transfer_us"] + parts["wait_us"]
    out["tokens"] = [{
        "rank": recs[r]["rank"], "token": t, "latency_us": float(latency[r, t]),
        "latency_us_measured": float(lat[r, t]),
        **{k: float(v[r, t]) for k, v in parts.items()}, "residual_us": float(residual[r, t]),
        "comm_share_pct": float(100.0 * comm_us[r, t] / latency[r, t]) if latency[r, t] > 0 else 0.0,
    } for r in range(R) for t in range(T)]
    layers = []
    for i in range(n_layers_run):
        sel = layer_of == i
        ncoll = int((sel & comm).sum())
        for r in range(R):
            c = float(compute[r][:, sel].sum(-1).mean())
            tr = float(transfer[r][:, sel].sum(-1).mean())
            w = float(wait[r][:, sel].sum(-1).mean())
            strag = int((straggler[:, sel & comm] == r).sum())
            layers.append({"layer": i, "rank": recs[r]["rank"], "compute_us": c, "transfer_us": tr, "wait_us": w,
                           "comm_share_pct": 100.0 * (tr + w) / (c + tr + w) if c + tr + w > 0 else 0.0,
                           "straggler_count": strag, "collectives": ncoll * T})
    out["layers"] = layers
    n_comm_run = int(comm.sum())
    n_layer_comm = int((comm & in_layer).sum())
    out["collectives_per_step"] = int(round(n_comm_run - n_layer_comm + n_layer_comm * scale))
    out["scaled"] = scale != 1.0
    out["layers_run"] = n_layers_run
    return out


def summarize(tokens: list[dict], batch: int, collectives_per_step: int, chunk: int = 0, prompt: int = 0) -> dict:
    """One line per run. ms/token: median over tokens of the slowest rank's latency. Shares: of
    all token time on all ranks, the part in each component (so communication = transfer + wait).

    With a prefill chunk (``chunk`` > 0; ``batch`` 0 is a prefill, more a mixed step) each "token"
    is one chunk step: ``ms_per_token`` is ms per step, ``collectives_per_token`` per token in the
    step (batch + chunk), ``tokens_per_s`` the prompt tokens per second of a prefill (the decode
    tokens per second of a mixed step), and the time to first token of a ``prompt``-token prompt
    is its ceil(prompt / chunk) steps: ``ttft_ms`` (mean step of the slowest rank x steps),
    ``ttft_comm_ms`` its communication (its share is ``comm_share_pct``)."""
    import numpy as np

    by_t = {}
    for row in tokens:
        by_t.setdefault(row["token"], []).append(row)
    lat = np.array([max(r["latency_us"] for r in rs) for rs in by_t.values()])
    mean = lambda k: np.array([np.mean([r[k] for r in rs]) for rs in by_t.values()])  # noqa: E731
    total = float(sum(r["latency_us"] for r in tokens))
    share = lambda k: 100.0 * float(sum(r[k] for r in tokens)) / total if total > 0 else 0.0  # noqa: E731
    ms = float(np.median(lat)) / 1e3
    resid = max(abs(r["residual_us"]) / r["latency_us"] for r in tokens if r["latency_us"] > 0)
    phase = {"phase": "decode", "prompt": "", "chunk": "", "ttft_ms": "", "ttft_comm_ms": "",
             "ttft_comm_share_pct": ""}
    per_s = batch
    if chunk:
        steps = -(-prompt // chunk) if prompt else len(by_t)
        ttft = float(np.mean(lat)) * steps / 1e3
        comm = share("transfer_us") + share("wait_us")
        phase = {"phase": "mixed" if batch else "prefill", "prompt": prompt, "chunk": chunk, "ttft_ms": ttft,
                 "ttft_comm_ms": ttft * comm / 100.0, "ttft_comm_share_pct": comm}
        per_s = batch or chunk
    parts_ms = {k: float(np.median(mean(f"{k}_us"))) / 1e3 for k in ("compute", "transfer", "wait", "gaps")}
    return {
        **phase,
        # medians do not add (the median of a sum is not the sum of the medians, and ms_per_token is
        # the slowest rank's, the parts the mean over ranks): what the four parts leave of it
        "remainder_ms": ms - sum(parts_ms.values()),
        "ms_per_token": ms, "tokens_per_s": per_s * 1e3 / ms if ms > 0 else float("nan"),
        "collectives_per_step": collectives_per_step,
        "collectives_per_token": collectives_per_step / (batch + chunk),
        "comm_share_pct": share("transfer_us") + share("wait_us"),
        "transfer_share_pct": share("transfer_us"), "wait_share_pct": share("wait_us"),
        "compute_ms": parts_ms["compute"], "transfer_ms": parts_ms["transfer"], "wait_ms": parts_ms["wait"],
        "gaps_ms": parts_ms["gaps"],
        "max_residual_pct": 100.0 * resid, "tokens": len(by_t),
    }


def attribute_tokens(recs: list[dict], layers_model: int, tp: int, batch: int, chunk: int = 0, prompt: int = 0) -> dict:
    """:func:`attribute` of one run, with its :func:`summarize` line under ``"summary"`` (a
    prefill or mixed run with ``chunk`` and ``prompt``)."""
    att = attribute(recs, layers_model, tp)
    att["summary"] = summarize(att["tokens"], batch, att["collectives_per_step"], chunk, prompt)
    return att


def pool_repeats(rep_recs: list[list[dict]]) -> list[dict]:
    """The repeats of one run (``trace --repeat``; each a list of the ranks' stamps) as one run:
    per rank, every repeat's tokens one after another (repeat r's token t becomes token
    r x tokens + t), so the summary's medians are over every repeat's tokens."""
    import numpy as np

    if len(rep_recs) == 1:
        return rep_recs[0]
    by_rank: dict = {}
    for recs in rep_recs:
        for r in recs:
            by_rank.setdefault(r["rank"], []).append(r)
    out = []
    for rank, rs in sorted(by_rank.items()):
        out.append({**rs[0], "lat": np.concatenate([r["lat"] for r in rs]),
                    "offs": np.concatenate([r["offs"] for r in rs]), "durs": np.concatenate([r["durs"] for r in rs])})
    return out


def slowest_token_ms(att: dict) -> list[float]:
    """Each token's slowest rank's latency in ms (what ``ms_per_token`` is the median of), in token order."""
    by_t: dict = {}
    for row in att["tokens"]:
        by_t[row["token"]] = max(by_t.get(row["token"], 0.0), float(row["latency_us"]) / 1e3)
    return [by_t[t] for t in sorted(by_t)]
