"""What ``commprof import nccl-debug`` shows: the communicators at a glance, the overrides, the
engine's lines, and the check items with what to do next."""
from __future__ import annotations


def account_lines(meta: dict, comms: list[dict], items: list[dict]) -> list[str]:
    """The lines a person reads: one per communicator shape, then the account's scalars, then items."""
    info = meta.get("nccl_debug", {})
    out = []
    if not info.get("nccl_lines"):
        out.append(f"no NCCL INFO line in {info.get('files', 0)} file(s) ({info.get('lines', 0):,} lines): "
                   "NCCL_DEBUG=INFO was not set for this run")
    shapes = {}
    for c in comms:
        shapes.setdefault(c["summary"], 0)
        shapes[c["summary"]] += 1
    for s, n in shapes.items():
        out.append(f"{s}" + (f"  (x{n} communicators)" if n > 1 else ""))
    if info.get("nccl_version"):
        out.append("NCCL " + ", ".join(info["nccl_version"])
                   + (f" (CUDA {', '.join(info['cuda_version'])})" if info.get("cuda_version") else ""))
    if info.get("networks"):
        nets = [f"{k} (in the lines of {len(v)} host{'' if len(v) == 1 else 's'})" for k, v in info["networks"].items()]
        out.append("network: " + ", ".join(nets))
    fab = info.get("nvlink_fabric") or {}
    if fab.get("multi_node_domain_gpus"):
        out.append(f"NVLink fabric: {fab['multi_node_domain_gpus']} GPU(s) on {fab['multi_node_domain_hosts']} host(s) "
                   f"in a multi-node NVLink domain (clique {', '.join(fab['cliques'])}; state "
                   f"{', '.join(fab['states'])}, healthMask {', '.join(fab['health_masks'])} as NCCL printed them)")
    if info.get("env_overrides"):
        out.append("set by environment: " + ", ".join(f"{k}={'|'.join(v)}" for k, v in info["env_overrides"].items()))
    eng = info.get("engine", {})
    if eng:
        bits = [f"{k}={v}" for k, v in eng.items() if k != "all_reduce_backends"]
        if eng.get("all_reduce_backends"):
            bits.append("all-reduce backends " + "/".join(eng["all_reduce_backends"]))
        out.append("engine: " + "; ".join(bits))
    if info.get("repeated_lines_folded"):
        out.append(f"note: Ray folded {info['repeated_lines_folded']:,} more lines into '[repeated Nx]' suffixes: "
                   "the pairs counted are those printed")
    for it in items:
        out.append(f"{it['verdict']:<5} {it['id']} {it['item']}: {it['evidence']}")
        if it.get("what_now"):
            out.append(f"      what now: {it['what_now']}")
    return out
