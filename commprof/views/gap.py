"""Views of gap's numbers: the comparison table, fit and wire lines, the wire chart."""
from __future__ import annotations


from ..units import human_bytes
from .charts import _save
from .console import stdout_console

WIRE_PNG = "wire_vs_nccl.png"


def wire_chart(sweep_df, w: dict | None, out_path: str, provenance: str, custom=None) -> str:
    """NCCL's all-reduce p50 per TP degree against the wire bound from the p2p probes (dashed) and
    commprof's one-shot kernel (dotted, ``sweep --impl custom`` rows), whichever are present."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..costmodel import wire_latency_us

    df = sweep_df[(sweep_df["op"] == "all_reduce") & (sweep_df["group"] == 0)]
    fig, ax = plt.subplots(figsize=(7, 4.6))
    for (tp, mode), g in df.groupby(["tp", "mode"]):
        g = g.sort_values("size_bytes")
        line, = ax.plot(g["size_bytes"], g["latency_us_p50"], marker="o", ms=3,
                        label=f"{g['backend'].iloc[0] if 'backend' in g else 'NCCL'} TP={tp} {mode} p50")
        if w is not None:
            ax.plot(g["size_bytes"], [wire_latency_us(w, int(tp), int(x)) for x in g["size_bytes"]], "--",
                    color=line.get_color(), label=f"wire bound TP={tp}")
        if custom is not None and mode == "eager":
            c = custom[(custom["op"] == "all_reduce") & (custom["group"] == 0) & (custom["tp"] == tp)]
            if not c.empty:
                c = c.sort_values("size_bytes")
                ax.plot(c["size_bytes"], c["latency_us_p50"], ":", marker="s", ms=3, color=line.get_color(),
                        label=f"custom one-shot TP={tp} p50")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("all_reduce size per rank (bytes)")
    ax.set_ylabel("latency (us)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if w is not None:
        ax.set_title(f"all-reduce vs the wire (one hop {w['oneway_us']:.2f} us + reading peers at "
                     f"{w['read_gbps']:.0f} GB/s)", fontsize=9)
    else:
        ax.set_title("all-reduce: the backend's collective vs commprof's one-shot kernel", fontsize=9)
    return _save(fig, out_path, provenance[:150])


HEADERS = ("op", "tp", "mode", "size", "metric", "this box", "reference (modelled)", "ratio")


def provenance_line(g) -> str:
    line = (f"this box: {g.this_box}; reference: {g.reference} = {g.reference_title} (modelled from published "
            f"figures, sources in commprof/profiles.py); ratio = this box / reference")
    if g.box_kind == "cpu":
        line += "; this box ran on CPU ranks (gloo): the ratios show the pipeline, not a GPU box"
    return line


def table_rows(g) -> list[tuple]:
    """The gap table as text cells (binary size units, the unit beside each value)."""
    return [(r.op, r.tp, r.mode, human_bytes(int(r.size_bytes)), r.metric,
             f"{r.this_box:.1f} {r.unit}", f"{r.reference:.1f} {r.unit}" + (f" ({r.reference_mode})"
                                                                          if r.metric == "latency" else ""),
             f"{r.ratio:.2f}x") for r in g.table.itertuples()]


def fit_lines(fits) -> list[str]:
    out = []
    for f in fits:
        beta = "inf" if f.beta_gbps in (None, float("inf")) else f"{f.beta_gbps:.2f} GB/s"
        out.append(f"fit {f.op} tp={f.tp} {f.mode}: latency = {f.alpha_us:.1f} us + bytes / {beta} "
                   f"(mean error {f.mean_rel_err_pct:.1f}%, max {f.max_rel_err_pct:.1f}%, {f.n_sizes} sizes)")
    return out


def custom_lines(g) -> list[str]:
    import numpy as np

    out = []
    name = g.backend
    for tp, t in g.custom.groupby("tp"):
        t = t.sort_values("size_bytes")
        r = t.iloc[0]
        out.append(f"custom one-shot vs {name} all_reduce TP={tp} (eager, same sweep): at {int(r.size_bytes)} B p50 "
                   f"{r.custom_us:.1f} us vs {r.base_us:.1f} us ({name}/custom = {r.base_over_custom:.2f}x); median "
                   f"{np.median(t['base_over_custom']):.2f}x over {len(t)} size(s) up to {int(t['size_bytes'].max())} B")
    return out


def wire_lines(g) -> list[str]:
    w = g.wire
    if w is None:
        return []
    out = [f"wire (measured by commprof p2p over {w['scope']}): one-way latency {w['oneway_us']:.2f} us, "
           f"SM read {w['read_gbps']:.1f} GB/s"]
    for r in g.wire_rows.itertuples():
        if r.impl == "custom":
            out.append(f"custom one-shot all_reduce TP={r.tp} at {r.size_bytes} B: p50 {r.latency_us_p50:.1f} us = "
                       f"{r.latency_us_p50 / r.bound_us:.1f}x the wire bound {r.bound_us:.1f} us")
        else:
            out.append(f"NCCL all_reduce TP={r.tp} {r.mode} at {r.size_bytes} B: p50 {r.latency_us_p50:.1f} us = "
                       f"{r.latency_us_p50 / r.bound_us:.1f}x the wire bound {r.bound_us:.1f} us (one hop + reading "
                       f"{r.tp - 1} peers' buffers)")
    return out


def per_token_lines(g) -> list[str]:
    return [f"this box ({r.kind}{', scaled' if r.scaled else ''}): TP={r.tp} batch={r.batch} communication share "
            f"{r.comm_share_pct:.1f}%, {r.ms_per_token:.2f} ms/token; on {g.reference} (modelled, compute and gaps "
            f"kept): {r.ref_comm_share_pct:.1f}%, {r.ref_ms_per_token:.2f} ms/token" for r in g.per_token.itertuples()]


def lines(g) -> list[str]:
    """Everything gap says beside its table: fits, custom vs backend, the wire, the per-token impact."""
    return fit_lines(g.fits) + custom_lines(g) + wire_lines(g) + per_token_lines(g)


def render_gap(g, console=None) -> None:
    from rich.table import Table

    console = console or stdout_console(160)
    t = Table(title=f"commprof gap vs {g.reference}", title_justify="left")
    for h in HEADERS:
        t.add_column(h)
    for r in table_rows(g):
        t.add_row(*(str(c) for c in r))
    console.print(t)
    console.print(provenance_line(g), style="dim")
    for line in lines(g):
        console.print(line)
