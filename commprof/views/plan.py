"""A decode step's plan (``commprof plan``) as tables: collectives per step and memory per rank."""
from __future__ import annotations

from commprof.model.models import is_sliding
from commprof.model.units import human_bytes
from commprof.views.console import Col, fit_table, stdout_console
from commprof.model.collectives import COLLECTIVES


def _ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start, prev = [], None, None
    for i in layers:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ", ".join(out)


def group_sites(sites) -> list[dict]:
    """Sites with the same kind, op and sizes merged, in order of first appearance:
    ``{"label", "kind", "op", "size_bytes", "send_bytes_per_rank", "count", "layers"}``."""
    groups: dict[tuple, dict] = {}
    for s in sites:
        key = (s.kind, s.op, s.size_bytes, s.send_bytes_per_rank)
        g = groups.setdefault(key, {"kind": s.kind, "op": s.op, "size_bytes": s.size_bytes,
                                    "send_bytes_per_rank": s.send_bytes_per_rank, "count": 0, "layers": []})
        g["count"] += 1
        if s.layer is not None:
            g["layers"].append(s.layer)
    for g in groups.values():
        label = KIND_LABEL.get(g["kind"], g["kind"])
        if g["layers"]:
            word = "layer" if len(g["layers"]) == 1 else "layers"
            label = f"{word} {_ranges(g['layers'])} {label}"
        g["label"] = label
    return list(groups.values())


def render_plan(plan, console=None) -> None:
    """Print the plan: header, collectives grouped by kind with layer ranges, totals, memory."""
    console = console or stdout_console(150)
    m = plan.model
    mode = ", sequence parallel" if plan.sp else ""
    if m.experts:
        mode += f", MoE {'expert' if plan.moe == 'ep' else 'tensor'} parallel"
    pf = plan.prefill
    if plan.phase == "prefill":
        what = f"prefill of a {pf['prompt']}-token prompt in chunks of {pf['chunk']}"
    elif plan.phase == "mixed":
        what = (f"mixed step: a {pf['chunk']}-token chunk of a {pf['prompt']}-token prompt + {plan.batch} decode "
                f"tokens, context {plan.context}")
    else:
        what = f"batch {plan.batch}, context {plan.context}"
    console.print(f"[bold]commprof plan[/bold]: {m.name}, tp {plan.tp}, {what}, {plan.dtype}{mode}")
    console.print(f"modelled from {m.source or 'the model shape given'}; nothing was run")

    c = plan.counts
    if not plan.sites:
        console.print("tp 1: one GPU holds the whole model, so a decode step runs no collectives.")
    else:
        title = {"prefill": f"collectives of one prefill chunk step ({pf['chunk'] if pf else '?'} tokens)",
                 "mixed": "collectives of one mixed step"}.get(plan.phase, "collectives of one decode step")
        cols = [Col("site", "left", None), Col("op", "left", None), Col("size", "right", None),
                Col("send/rank", "right", 0), Col("count", "right", None), Col("bytes/step", "right", 1)]
        fit_table(title, cols, [[g["label"], g["op"], human_bytes(g["size_bytes"]), human_bytes(g["send_bytes_per_rank"]),
                                 f"x{g['count']}", human_bytes(g["size_bytes"] * g["count"])]
                                for g in group_sites(plan.sites)], console=console)
        per_token = c["collectives_per_token"]
        per_token_text = f"{per_token:g}" if per_token == int(per_token) else f"{per_token:.2f}"
        ops = ", ".join(f"{n} {op}" for op, n in c["by_op"].items())
        per_what = "per generated token" if plan.phase == "decode" else "per token in the step"
        console.print(f"per step: {c['collectives_per_step']} collectives ({ops}); "
                      f"{per_what}: {per_token_text}; "
                      f"bytes per step: {human_bytes(c['size_bytes_per_step'])} in nccl-tests sizes; "
                      f"one rank's input buffers {human_bytes(c['send_bytes_per_rank_per_step'])}, "
                      f"{human_bytes(wire_bytes_per_rank(plan.sites, plan.tp))} on the wire per rank "
                      "(ring: size x nccl-tests' bus factor)")
        if pf:
            for line in prefill_lines(plan):
                console.print(line)

    w = plan.weights
    parts = [("embedding", "embedding"), ("lm_head", "lm_head"), ("attention", "attention"),
             ("dense_mlp", "MLP"), ("moe_experts", "experts"), ("moe_shared_experts", "shared experts"),
             ("moe_router", "router")]
    detail = ", ".join(f"{label} {human_bytes(w[k])}" for k, label in parts if w[k])
    console.print(f"weights/rank: {human_bytes(w['total'])} ({detail})")
    note = ""
    if m.sliding_window:
        sliding = sum(1 for i in range(m.layers) if is_sliding(m, i))
        note = f" ({sliding} sliding-window layers keep at most {m.sliding_window} tokens)"
    elif m.is_mla:
        note = " (MLA latent, on every rank)"
    console.print(f"KV/token/rank: {human_bytes(plan.kv_bytes_per_token_per_rank)}{note}; "
                  f"KV/sequence/rank at {plan.context} tokens: {human_bytes(plan.kv_bytes_per_sequence_per_rank)}")
    if plan.gpu_mem_bytes is None:
        console.print("pass --gpu-mem (e.g. 80G) to count the sequences that fit")
    elif not plan.weights_fit:
        console.print(f"[red]does not fit[/red]: weights/rank {human_bytes(w['total'])} exceed "
                      f"{human_bytes(plan.usable_bytes)} usable ({plan.mem_util:g} of "
                      f"{human_bytes(plan.gpu_mem_bytes)}); use a larger --tp "
                      "(quantised weights are not modelled)")
    else:
        line = (f"fits {plan.max_sequences} sequences of {plan.context} tokens on a GPU of "
                f"{human_bytes(plan.gpu_mem_bytes)} at {plan.mem_util:g} "
                f"(KV budget {human_bytes(plan.kv_budget_bytes)}; activations and workspace ignored)")
        if plan.max_sequences < plan.batch:
            line += f"; [red]batch {plan.batch} does not fit[/red]"
        console.print(line)


KIND_LABEL = {
    "embedding": "embedding",
    "attn_out": "attention-out",
    "mlp_out": "MLP-out",
    "moe_dispatch": "MoE dispatch",
    "moe_combine": "MoE combine",
    "logits": "logits",
}


def wire_bytes_per_rank(sites, tp: int) -> int:
    """Bytes one rank moves over the interconnect for ``sites`` under a ring algorithm: each call's
    nccl-tests size times its bus factor (all_reduce 2(n-1)/n: a rank sends almost twice its
    buffer; all_gather (n-1)/n of the gathered output), the figure busbw is defined on."""
    return int(round(sum(s.size_bytes * COLLECTIVES[s.op].busbw_factor(tp) for s in sites)))


def prefill_lines(plan) -> list[str]:
    """A prefill or mixed plan's totals over the prompt, its chunks and one step's activations."""
    pf = plan.prefill
    tot = pf["total"]
    decode = f" + {pf['decode_tokens']} decode" if pf["decode_tokens"] else ""
    sizes = "; ".join(f"{p['steps']} x {p['chunk_tokens']} prompt tokens{decode} ({p['collectives_per_step']} collectives, "
                      f"{human_bytes(p['size_bytes_per_step'])}/step)" for p in pf["per_chunk_size"])
    ops = ", ".join(f"{n} {op}" for op, n in tot["by_op"].items())
    lines = [f"whole prompt ({pf['prompt']} tokens): {pf['steps']} step(s): {sizes}",
             f"prompt total: {tot['collectives']} collectives ({ops}); {human_bytes(tot['size_bytes'])} in "
             f"nccl-tests sizes; one rank's input buffers {human_bytes(tot['send_bytes_per_rank'])}",
             f"logits: each step all-gathers {pf['logits_tokens_per_step']} token(s) (the chunk's last"
             + (" and the decode tokens" if pf["decode_tokens"] else "") + "): the last chunk's is the first "
             "output token",
             f"activations/rank of one step ({pf['tokens_per_step']} tokens): "
             f"{human_bytes(pf['activation_bytes_per_rank']['total'])} (modelled peak of one layer, flash "
             f"attention); KV cache of the prompt/rank: {human_bytes(pf['kv_bytes_prompt_per_rank'])}"]
    return lines
