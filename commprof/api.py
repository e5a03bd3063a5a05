"""commprof as a library: the verbs' numbers as pandas DataFrames, for notebooks and scripts.

>>> import commprof
>>> steps = commprof.plan("Qwen2.5-32B", tp=8)            # one row per collective of a decode step
>>> len(steps), steps.attrs["counts"]["collectives_per_step"]
(130, 130)
>>> r = commprof.load("results/sweep-default-vm")          # any verb's results dir
>>> sweep = r["sweep"]                                     # typed DataFrame, provenance in r.meta
>>> fits = commprof.fit(sweep)                             # alpha-beta per op, tp, mode
>>> gap = commprof.compare(["results/sweep-default-vm"], reference="nvlink4")
>>> r = commprof.import_kineto(["rank0.json", "rank1.json"], "out/engine", model="Qwen2.5-32B")
>>> r["trace_tokens"]                                      # per step and rank: compute, transfer, wait

Nothing here prints or draws; every function returns numbers (DataFrames carry their
provenance in ``.attrs``).
"""
from __future__ import annotations

from dataclasses import asdict

from commprof.results import Results, load

__all__ = ["Results", "load", "plan", "predict", "fit", "compare", "checklist", "reference", "import_kineto"]


def plan(model: str, tp: int, batch: int = 1, context: int = 4096, gpu_mem_bytes: int | None = None,
         dtype: str = "bf16", sp: bool = False, moe: str = "tp", phase: str = "decode", prompt: int | None = None,
         chunk: int | None = None):
    """The collectives of one decode step (``commprof plan``): one row per collective (site, kind,
    op, layer, size in the sweep's meaning, bytes one rank sends). ``.attrs`` holds the per-step and
    per-token counts, the memory per rank and the model's source: modelled, nothing runs.

    ``phase="prefill"`` (with ``prompt``, optional ``chunk``): the rows are one prefill chunk
    step's and ``.attrs["prefill"]`` holds the whole prompt's steps and totals and one step's
    activations; ``phase="mixed"`` (with ``prompt`` and ``chunk``): one step of a chunk and
    ``batch`` decode tokens."""
    import pandas as pd

    from commprof.model.models import get_model
    from commprof.analysis.stepmodel import build_plan

    p = build_plan(get_model(model), tp, batch, context, gpu_mem_bytes=gpu_mem_bytes, dtype=dtype, sp=sp, moe=moe,
                   phase=phase, prompt=prompt, chunk=chunk)
    df = pd.DataFrame([s.to_dict() for s in p.sites])
    doc = p.to_dict()
    df.attrs.update(kind="modelled", model=p.model.name, source=p.model.source, tp=tp, batch=batch,
                    counts=doc["counts"], memory=doc["memory"], phase=p.phase, prefill=doc["prefill"])
    return df


def predict(model: str = "Qwen2.5-32B", gpu="rtx5090", comm=None, tp=(2, 4, 8), batch=(1, 8, 32),
            context: int = 4096, prompt: int | None = None, dtype: str = "bf16", weights: str = "bf16",
            mode: str = "graph", mem_util: float = 0.9, ep: int = 1, concurrency=(), qps=(), isl: int = 1024,
            osl: int = 256, chunk: int = 2048, prefill_steps: str = "mixed", sampling: str = "greedy",
            ep_comm: str = "all-to-all"):
    """Each token's time on a box you don't own (``commprof predict``): one row per (box, TP, batch)
    with exactly the columns and values of the verb's ``predict.csv``; ``.attrs`` holds what its
    meta.json holds (the model, each box's GPU and comm source, the calibration, the notes).
    ``gpu`` and ``comm``: one or a list each (``comm``: ``reference:<profile>``, a results dir or a
    :class:`commprof.analysis.commsource.CommSource`; None: the GPU's class default). ``ep``:
    expert parallelism (``--ep``) and its collective (``ep_comm``, ``--ep-comm``: all-to-all or all-reduce); ``concurrency`` / ``qps`` with ``isl``, ``osl``, ``chunk`` and
    ``prefill_steps`` (``--prefill-steps``: mixed or separate): the load (``--concurrency``, ``--qps``),
    which then decides the batch. ``sampling``: ``--sampling`` (greedy or full: top-p and penalties)."""
    import pandas as pd

    from commprof.analysis.predictmodel import CSV_COLUMNS, predict_table

    listed = (lambda v: [v] if isinstance(v, (str, int)) or not hasattr(v, "__iter__") else list(v))
    more = {"ep": ep, "ep_comm": ep_comm}
    if concurrency or qps:      # a server under load (commprof.analysis.predictload)
        from commprof.analysis.predictload import load_spec
        more["load"] = load_spec(listed(concurrency) if concurrency else [], listed(qps) if qps else [], isl, osl, chunk,
                                 prefill_steps)
    rows, _, meta = predict_table(model, listed(gpu), [] if comm is None else listed(comm), listed(tp),
                                  listed(batch), context, prompt, dtype, weights, mode, mem_util, sampling=sampling,
                                  **more)
    cols = meta.get("csv_columns", CSV_COLUMNS)
    df = pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)
    df.attrs.update(kind="predicted", **meta)
    return df


def fit(sweep):
    """alpha-beta fits (latency = alpha + bytes / beta) per op, tp and mode of a sweep: a results
    dir, a :class:`Results` or its ``sweep`` DataFrame. Columns as :class:`costmodel.Fit`."""
    import pandas as pd

    from commprof.analysis.costmodel import fit_sweep

    if isinstance(sweep, str):
        sweep = load(sweep)
    if isinstance(sweep, Results):
        sweep = sweep["sweep"]
        sweep = sweep[sweep["impl"] != "custom"]
    return pd.DataFrame([asdict(f) for f in fit_sweep(sweep)])


def compare(dirs, reference: str | None = None):
    """This box (its results dirs) against a reference profile (``commprof gap``): one row per
    op, tp, mode, size and metric with this box's value, the reference's (modelled) and the ratio.
    ``.attrs``: the reference, the box's kind and, with a trace among the dirs, the per-token
    impact as records; ``ttft``: the time to first token's communication here and on the
    reference, and the chunk size each favours (see ``commprof gap``)."""
    from commprof.analysis.boxgap import compute_gap

    g = compute_gap([dirs] if isinstance(dirs, str) else list(dirs), reference)
    df = g.table.copy()
    df.attrs.update(reference=g.reference, reference_title=g.reference_title, box_kind=g.box_kind,
                    this_box=g.this_box, per_token=g.per_token.to_dict("records"), wire=g.wire,
                    ttft=g.first.ttft)
    return df


def checklist(dirs, thresholds: str | None = None, model: str | None = None):
    """The pre-purchase checklist (``commprof check``) over results dirs: one row per item with
    its status, value, threshold, source and hint; ``.attrs["verdict"]``."""
    import pandas as pd

    from commprof.analysis.checkitems import run_items
    from commprof.analysis.evidence import gather
    from commprof.analysis.thresholds import load_thresholds
    from commprof.analysis.verdict import verdict

    items = run_items(gather([dirs] if isinstance(dirs, str) else list(dirs)), load_thresholds(thresholds), model)
    df = pd.DataFrame([i.to_dict() for i in items])
    df.attrs["verdict"] = verdict(items)
    return df


def reference(name: str, op: str, tp: int, sizes, mode: str = "eager"):
    """A reference profile's modelled latency (us) for ``sizes`` (bytes), with its sources in
    ``.attrs`` (``commprof/analysis/profiles.py``: every parameter published or derived)."""
    import pandas as pd

    from commprof.analysis.costmodel import get_profile, profile_latency_us

    p = get_profile(name.removeprefix("reference:"))
    df = pd.DataFrame({"size_bytes": [int(s) for s in sizes]})
    df["latency_us"] = [profile_latency_us(p, op, tp, s, mode) for s in df["size_bytes"]]
    df.attrs.update(kind="modelled", profile=p["name"], title=p["title"], sources=p["sources"])
    return df


def import_kineto(paths, out: str, step_marker: str | None = None, model: str | None = None,
                  tp: int | None = None) -> Results:
    """PyTorch profiler (Kineto) traces of a serving engine, attributed as ``commprof import
    kineto`` does: writes the results dir ``out`` (imported, with the files' sha256) and returns it
    loaded: ``trace_summary`` and ``trace_tokens`` (per step and rank: compute, transfer, wait,
    gaps), ``kineto_steps``, ``kineto_collectives``, ``kineto_ranks``. ``model`` compares the
    collectives per step with that model's plan; a bad file raises ``commprof.model.errors.UsageError``
    (one line, naming the file)."""
    from commprof.ingest.kineto import import_kineto as _import

    _import([paths] if isinstance(paths, str) else list(paths), out, step_marker=step_marker, model=model, tp=tp)
    return load(out)
