"""Link probes (``commprof p2p``) as matrices."""
from __future__ import annotations

from commprof.views.console import Col, fit_table, stdout_console


def render_p2p(rows: list[dict], n: int, console=None) -> None:
    console = console or stdout_console(160)
    views = (("SM read GB/s (row reads column)", "sm_copy", "read", "gbps"),
             ("SM write GB/s (row writes column)", "sm_copy", "write", "gbps"),
             ("copy engine GB/s", "copy_engine", None, "gbps"),
             ("ping-pong one-way latency us", "pingpong", None, "oneway_us"),
             ("P2P off: host-staged GB/s", "host_staged", None, "gbps"))
    for title, probe, kind, col in views:
        cell = {}
        for r in rows:
            if r["probe"] != probe or (kind and r.get("kind") not in (kind, "same-gpu")):
                continue
            a, b = (r["dst_device"], r["src_device"]) if kind == "read" else (r["src_device"], r["dst_device"])
            v = r.get(col)
            cell[(a, b)] = f"{v:.2f}" if isinstance(v, float) else "-"
        fit_table(title, [Col("", "left", None)] + [Col(f"GPU{j}", "right", None) for j in range(n)],
                  [[f"GPU{i}", *(cell.get((i, j), "-") for j in range(n))] for i in range(n)], console=console)
