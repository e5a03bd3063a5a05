"""The per-rank side of ``commprof moe``: dispatch and combine all-to-all with variable splits.

For each cell (ep, tokens, skew, placement) ranks 0..ep-1 form the EP group; every rank computes
the same routing and placement from the seed (``commprof.analysis.moeroute.plan``), so each knows its split
sizes without a metadata exchange. One step = dispatch (each rank sends its tokens' hidden
vectors to the ranks holding their chosen experts) + combine (the reverse), two
``all_to_all_single`` calls. Every iteration starts barrier-aligned; its sample is the max over
the group's ranks. An untimed check first verifies sizes and contents of what each rank receives.
"""
from __future__ import annotations

import time

import numpy as np

from commprof.analysis import moeroute as moe   # the MoE step: routing, placement, slowdown
from commprof.model.moeconfig import DTYPE_BYTES
from commprof.results.moe import start_moe_meta, write_moe_tables
from commprof.analysis.stats import summarize_us
from microbench.collective_bench import make_groups
from microbench.rank import rank_session
from commprof import results


def _step_fn(torch, dist, group, inp, out, back, send, recv, cuda):
    def step():
        dist.all_to_all_single(out, inp, recv, send, group=group)    # dispatch
        dist.all_to_all_single(back, out, send, recv, group=group)   # combine
        if cuda:
            torch.cuda.synchronize()
    return step


def run_rank(cfg, rank: int, world: int, local_rank: int, store=None, slots=None):
    """Body of one moe rank. Raises on failure (the launcher reports it)."""
    with rank_session(cfg, rank, world, local_rank, store, slots) as env:
        torch, dist, hb, ctrl_world = env.torch, env.dist, env.hb, env.world_ctrl
        hb.stage("init: groups")
        sets = make_groups(dist, cfg.eps, world, cfg.backend)
        if rank == 0:
            start_moe_meta(cfg, env.infos)
        cells = cfg.cells()
        if slots is not None and rank == 0:
            slots.cells_total.value = len(cells)
        hidden = cfg.model["hidden"]
        cuda = env.device.type == "cuda"
        steps, rank_rows = [], []
        for ep, tokens, si, pl in cells:
            skew = cfg.skews[si].spec
            label = f"ep={ep} tokens={tokens} {skew} {pl}"
            payload = None
            if rank < ep:
                gs = sets[ep]
                data, ctrl = gs.data[0], gs.ctrl[0]
                hb.stage(f"{label}: plan")
                routing, placement = moe.plan(cfg, ep, tokens, si, pl)
                counts = moe.send_counts(routing, placement)
                send = [int(c) for c in counts[rank]]
                recv = [int(c) for c in counts[:, rank]]
                inp = torch.full((sum(send), hidden), float(rank + 1), dtype=torch.bfloat16, device=env.device)
                out = torch.empty((sum(recv), hidden), dtype=torch.bfloat16, device=env.device)
                back = torch.empty_like(inp)
                step = _step_fn(torch, dist, data, inp, out, back, send, recv, cuda)

                hb.stage(f"{label}: check")
                step()
                expect = torch.cat([torch.full((n, hidden), float(s + 1), dtype=torch.bfloat16)
                                    for s, n in enumerate(recv)]) if sum(recv) else out.cpu()
                ok = (out.numel() * out.element_size() == sum(recv) * hidden * DTYPE_BYTES
                      and bool(torch.equal(out.cpu(), expect)) and bool(torch.equal(back, inp)))
                hb.stage(f"{label}: warm-up")
                for _ in range(cfg.warmup):
                    dist.barrier(group=ctrl)
                    step()
                hb.stage(f"{label}: timing")
                lat = np.empty(cfg.iters, dtype=np.float64)
                f = env.fault           # commprof's own tests: kill or hang this rank mid-run
                fault_iter = f.iter if f is not None and f.kind in ("die", "hang") and \
                    f.applies(rank, "all_to_all", ep, pl) else -1
                for i in range(cfg.iters):
                    dist.barrier(group=ctrl)
                    if i == fault_iter:
                        f.trigger()
                    hb.enter()
                    t0 = time.perf_counter()
                    step()
                    lat[i] = (time.perf_counter() - t0) * 1e6
                    hb.leave()
                t = torch.from_numpy(lat)
                dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctrl)
                payload = {"rank": rank, "lat": t.numpy() if rank == 0 else None, "ok": ok,
                           "tokens_recv": out.shape[0], "bytes_recv": out.numel() * out.element_size(),
                           "bytes_sent": inp.numel() * inp.element_size(),
                           "bytes_recv_expected": sum(recv) * hidden * DTYPE_BYTES,
                           "experts_held": len(placement.experts_on(rank))}
                if rank == 0:
                    payload["plan"] = (routing, placement)
            hb.stage(f"{label}: collecting rows")
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(payload, gathered, dst=0, group=ctrl_world)
            if rank == 0:
                got = [g for g in gathered if g is not None]
                steps.append(_step_row(cfg, ep, tokens, skew, pl, got))
                rank_rows += [{"ep": ep, "tokens": tokens, "skew": skew, "placement": pl, "rank": g["rank"],
                               "experts_held": g["experts_held"], "load_tokens": g["tokens_recv"],
                               "tokens_recv": g["tokens_recv"], "bytes_sent": g["bytes_sent"],
                               "bytes_recv": g["bytes_recv"], "bytes_recv_expected": g["bytes_recv_expected"]}
                              for g in got]
                # rewritten (atomically) after every cell, so a run that dies keeps its finished rows
                write_moe_tables(cfg.out_dir, moe.add_slowdown(steps), rank_rows)
                hb.row_written(1)
        if rank == 0:
            results.finish_meta(cfg.out_dir, "complete")


def _step_row(cfg, ep, tokens, skew, pl, got) -> dict:
    routing, placement = got[0]["plan"]
    m = cfg.model
    loads = np.array([g["tokens_recv"] for g in got], dtype=np.int64)
    wrong = sum(1 for g in got if not g["ok"] or g["bytes_recv"] != g["bytes_recv_expected"])
    row = {"ep": ep, "tokens": tokens, "skew": skew, "placement": pl, "top_k": m["top_k"],
           "experts": m["experts"], "hidden": m["hidden"],
           "redundant_experts": cfg.redundant(ep) if pl == "rebalanced" else 0,
           "iters": cfg.iters, "warmup": cfg.warmup, "backend": cfg.backend,
           "clock": "perf_counter+cuda_sync" if cfg.backend == "nccl" else "perf_counter"}
    row.update(summarize_us(got[0]["lat"]))
    row.update(imbalance=moe.imbalance(loads), max_rank_tokens=int(loads.max()),
               mean_rank_tokens=float(loads.mean()),
               bytes_sent_max=max(g["bytes_sent"] for g in got), bytes_recv_max=max(g["bytes_recv"] for g in got),
               hot_ranks=moe.hot_list(loads), hot_experts=moe.hot_list(moe.expert_loads(routing, m["experts"])),
               wrong=wrong, status="ok" if wrong == 0 else "WRONG")
    return row
