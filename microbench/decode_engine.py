"""A synthetic tensor-parallel decode engine at a model's real shapes, with random weights.

One rank of a Megatron-style TP group runs, per decode step (one token per sequence):
vocab-parallel embedding + all-reduce; per layer RMSNorm, column-parallel QKV, attention over a
KV cache (grouped-query; sliding-window layers keep at most the window), row-parallel o_proj +
all-reduce, RMSNorm, column-parallel gate/up, SwiGLU, row-parallel down + all-reduce; final norm,
vocab-parallel lm_head + all-gather of the logits, greedy next token.

Each segment (compute or collective) is stamped at its start and end: ``time.perf_counter`` on
CPU, CUDA events on GPU. The timeline of one token is thus tiled by segments and the gaps between
them (host and launch overhead). With ``comm=False`` the collectives are skipped, which measures
one rank's compute alone (for predictions).

Approximations, recorded with the results: MLA attention runs as grouped-query attention with the
model's head counts; an MoE MLP runs as a dense MLP as wide as the active experts
(top_k x expert_ffn, plus shared experts); Gemma-specific extra norms and soft-capping are left out.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from commprof.model.collectives import all_gather_fn
from microbench.timing import timing_event
from commprof.model.models import ModelShape, is_sliding


@dataclass(frozen=True)
class Segment:
    name: str          # "embedding", "layer 3 attention", "layer 3 attention-out", ...
    kind: str          # compute: embed, attn, mlp, head, sample; comm: embedding, attn_out, mlp_out, logits
    layer: int         # -1 outside the layers
    is_comm: bool


def engine_dims(shape: dict, tp: int) -> dict:
    """Per-rank dimensions of the engine for a model shape (``ModelShape.to_dict()``)."""
    q_heads, kv_heads, d = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    ffn = shape["ffn"]
    if shape.get("experts"):
        shared = shape.get("shared_experts", 0) or 0
        shared_ffn = shape.get("shared_expert_ffn", 0) or shape["expert_ffn"]
        ffn = shape["top_k"] * shape["expert_ffn"] + shared * shared_ffn
    return {
        "hidden": shape["hidden"],
        "q_heads_r": q_heads // tp,
        "kv_heads_r": max(1, kv_heads // tp),
        "head_dim": d,
        "ffn_r": max(1, math.ceil(ffn / tp)),
        "vocab_r": math.ceil(shape["vocab"] / tp),
    }


def sliding_layers(shape: dict, n_layers: int) -> list[bool]:
    """Which of the first ``n_layers`` layers use a sliding window."""
    window = shape.get("sliding_window") or 0
    if not window:
        return [False] * n_layers
    try:
        fields = {k: v for k, v in shape.items() if k in ModelShape.__dataclass_fields__}
        m = ModelShape(**fields)
        return [bool(is_sliding(m, i)) for i in range(n_layers)]
    except Exception:  # noqa: BLE001 - no layer map: every layer slides
        return [True] * n_layers


class DecodeEngine:
    def __init__(self, torch, dist, shape: dict, tp: int, group_rank: int, batch: int, context: int,
                 dtype, device, n_layers: int, group=None, comm: bool = True, seed: int = 0, on_layer=None,
                 chunk: int = 0):
        """``on_layer()`` is called after each layer's weights are made (a heartbeat: a full
        model's build is long).

        ``chunk`` > 0 adds a prefill chunk to every step: ``chunk`` new tokens of one more sequence,
        attending over that sequence's cache of ``context`` tokens (its prompt so far), as a
        chunked-prefill engine runs them. ``batch`` decode tokens ride in the same step (a mixed
        step); ``batch=0`` with a chunk is a pure prefill step. Each all-reduce then carries
        (batch + chunk) x hidden elements, and the logits are taken for the decode tokens and the
        chunk's last token (the one that becomes the first output token)."""
        self.torch, self.dist, self.group, self.comm = torch, dist, group, comm
        self.tp, self.grank, self.batch, self.device, self.dtype = tp, group_rank, batch, device, dtype
        self.chunk = int(chunk)
        self.rows_out = batch + (1 if self.chunk else 0)        # tokens whose logits a step computes
        self.cuda = device.type == "cuda"
        dims = engine_dims(shape, tp)
        self.dims = dims
        h, hq, hkv, d = dims["hidden"], dims["q_heads_r"], dims["kv_heads_r"], dims["head_dim"]
        self.hq, self.hkv, self.d = hq, hkv, d
        self.group_size = max(1, hq // hkv)
        # Weights are drawn where they live: on a GPU its own generator fills them in place (the
        # CPU generator took ~140 s for Qwen2.5-32B at TP=1, single-threaded).
        g = torch.Generator(device=device).manual_seed(seed + 1000 * group_rank)

        def w(*size, scale=None):
            s = scale if scale is not None else 1.0 / math.sqrt(size[0])
            return torch.randn(*size, generator=g, dtype=dtype, device=device).mul_(s)

        self.vocab_r = dims["vocab_r"]
        self.vocab_start = group_rank * self.vocab_r
        self.emb = w(self.vocab_r, h, scale=1.0)
        self.layers = []
        window = shape.get("sliding_window") or 0
        sliding = sliding_layers(shape, n_layers)
        for i in range(n_layers):
            ctx = min(context, window) if (sliding[i] and window) else context
            self.layers.append({
                "ln1": torch.ones(h, dtype=dtype, device=device),
                "qkv": w(h, (hq + 2 * hkv) * d),
                "o": w(hq * d, h),
                "ln2": torch.ones(h, dtype=dtype, device=device),
                "gu": w(h, 2 * dims["ffn_r"]),
                "down": w(dims["ffn_r"], h),
                "k": w(batch, hkv, ctx, d, scale=1.0),
                "v": w(batch, hkv, ctx, d, scale=1.0),
                "ctx": ctx,
                # the prefill sequence's own cache (chunked prefill): one sequence, `ctx` tokens
                "kp": w(1, hkv, ctx, d, scale=1.0) if self.chunk else None,
                "vp": w(1, hkv, ctx, d, scale=1.0) if self.chunk else None,
            })
            if on_layer is not None:
                on_layer()
        self.ln_f = torch.ones(h, dtype=dtype, device=device)
        self.lm_head = w(h, self.vocab_r)
        self.ids = torch.zeros(batch + self.chunk, dtype=torch.int64, device=device)
        self.gathered = torch.empty(tp * self.rows_out, self.vocab_r, dtype=dtype, device=device)
        self.pos = 0
        self.pos_p = 0                                           # tokens of the prefill sequence so far
        self.segments = self._segments(n_layers)

    @staticmethod
    def _segments(n_layers: int) -> list[Segment]:
        segs = [Segment("embedding lookup", "embed", -1, False), Segment("embedding", "embedding", -1, True)]
        for i in range(n_layers):
            segs += [Segment(f"layer {i} attention", "attn", i, False),
                     Segment(f"layer {i} attention-out", "attn_out", i, True),
                     Segment(f"layer {i} MLP", "mlp", i, False),
                     Segment(f"layer {i} MLP-out", "mlp_out", i, True)]
        segs += [Segment("lm_head", "head", -1, False), Segment("logits", "logits", -1, True),
                 Segment("sample", "sample", -1, False)]
        return segs

    # --- the math of one step, in segment order -------------------------------------------------

    def _rms(self, x, w):
        t = self.torch
        xf = x.float()
        return (xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def _all_reduce(self, x):
        if self.comm and self.tp > 1:
            self.dist.all_reduce(x, group=self.group)
        return x

    def _embed(self):
        local = self.ids - self.vocab_start
        mask = (local < 0) | (local >= self.vocab_r)
        x = self.emb[local.clamp(0, self.vocab_r - 1)]
        return x.masked_fill(mask.unsqueeze(-1), 0)

    def _attention(self, L, x):
        t, b, hq, hkv, d = self.torch, self.batch, self.hq, self.hkv, self.d
        y = self._rms(x, L["ln1"]) @ L["qkv"]
        q, k, v = y.split([hq * d, hkv * d, hkv * d], dim=-1)
        outs = []
        if b:
            slot = self.pos % L["ctx"]
            L["k"][:, :, slot] = k[:b].view(b, hkv, d)
            L["v"][:, :, slot] = v[:b].view(b, hkv, d)
            qg = q[:b].view(b, hkv, self.group_size, d)
            scores = (qg @ L["k"].transpose(-1, -2)).float() / math.sqrt(d)      # (b, hkv, g, ctx)
            attn = t.softmax(scores, dim=-1).to(x.dtype) @ L["v"]                   # (b, hkv, g, d)
            outs.append(attn.reshape(b, hq * d))
        if self.chunk:
            outs.append(self._prefill_attention(L, q[b:], k[b:], v[b:]))
        a = outs[0] if len(outs) == 1 else t.cat(outs)
        return a @ L["o"]

    def _prefill_attention(self, L, q, k, v):
        """The chunk's queries over its sequence's cache (the chunk's own keys written first).
        Like decode, every query scores the whole cache (no causal mask: the same work)."""
        t, c, hq, hkv, d, g = self.torch, self.chunk, self.hq, self.hkv, self.d, self.group_size
        cap = L["ctx"]
        slots = (self.pos_p + t.arange(c, device=q.device)) % cap
        L["kp"][0, :, slots] = k.view(c, hkv, d).transpose(0, 1)
        L["vp"][0, :, slots] = v.view(c, hkv, d).transpose(0, 1)
        qg = q.view(c, hkv, g, d).permute(1, 0, 2, 3).reshape(1, hkv, c * g, d)
        scores = (qg @ L["kp"].transpose(-1, -2)).float() / math.sqrt(d)         # (1, hkv, c*g, cap)
        attn = t.softmax(scores, dim=-1).to(q.dtype) @ L["vp"]                     # (1, hkv, c*g, d)
        return attn.reshape(hkv, c, g, d).permute(1, 0, 2, 3).reshape(c, hq * d)

    def _mlp(self, L, x):
        t = self.torch
        gu = self._rms(x, L["ln2"]) @ L["gu"]
        gate, up = gu.chunk(2, dim=-1)
        return (t.nn.functional.silu(gate) * up) @ L["down"]

    def _logits(self, x):
        if self.chunk:                  # decode tokens and the chunk's last token only
            x = self.torch.cat([x[:self.batch], x[-1:]]) if self.batch else x[-1:]
        return self._rms(x, self.ln_f) @ self.lm_head

    def _gather(self, local):
        n = self.rows_out
        if self.comm and self.tp > 1:
            all_gather_fn(self.dist)(self.gathered, local.contiguous(), group=self.group)
        else:
            self.gathered.view(self.tp, n, self.vocab_r)[self.grank].copy_(local)
        return self.gathered

    def _sample(self, gathered):
        n = self.rows_out
        full = gathered.view(self.tp, n, self.vocab_r).permute(1, 0, 2).reshape(n, -1)
        nxt = full.float().argmax(-1) % (self.tp * self.vocab_r)
        if self.batch:
            self.ids[:self.batch].copy_(nxt[:self.batch])
        self.pos += 1
        self.pos_p += self.chunk

    # --- one step, stamped -----------------------------------------------------------------------

    def step(self, mark):
        """Run one decode step; ``mark(j)`` / ``mark(j, end=True)`` stamp segment j's bounds
        (a no-op when untraced)."""
        j = 0
        mark(j)
        x = self._embed()
        mark(j, True); j += 1
        mark(j)
        x = self._all_reduce(x)
        mark(j, True); j += 1
        m = None
        for L in self.layers:
            mark(j)
            if m is not None:
                x = x + m                  # residual adds are compute: kept inside segments
            a = self._attention(L, x)
            mark(j, True); j += 1
            mark(j)
            a = self._all_reduce(a)
            mark(j, True); j += 1
            mark(j)
            x = x + a
            m = self._mlp(L, x)
            mark(j, True); j += 1
            mark(j)
            m = self._all_reduce(m)
            mark(j, True); j += 1
        mark(j)
        if m is not None:
            x = x + m
        local = self._logits(x)
        mark(j, True); j += 1
        mark(j)
        gathered = self._gather(local)
        mark(j, True); j += 1
        mark(j)
        self._sample(gathered)
        mark(j, True)


class CpuStamps:
    """perf_counter stamps of one token: ``start[j]``, ``end[j]`` per segment, token bounds."""

    def __init__(self, nseg: int):
        self.start = [0.0] * nseg
        self.end = [0.0] * nseg
        self.t0 = self.t1 = 0.0

    def begin(self):
        self.t0 = time.perf_counter()

    def mark(self, j, end=False):
        if end:
            self.end[j] = time.perf_counter()
        else:
            self.start[j] = time.perf_counter()

    def finish(self):
        self.t1 = time.perf_counter()

    def latency_us(self) -> float:
        """The token's time alone (an untraced step marks no segment)."""
        return (self.t1 - self.t0) * 1e6

    def result_us(self):
        """(token latency, [segment start offsets], [segment durations]) in us."""
        t0 = self.t0
        return ((self.t1 - t0) * 1e6, [(s - t0) * 1e6 for s in self.start],
                [(e - s) * 1e6 for s, e in zip(self.start, self.end)])


ORIGIN_TOKEN = "token start"
ORIGIN_FIRST_SEGMENT = "first segment (elapsed_time across graph-recorded and outside events failed)"


class CudaStamps:
    """CUDA-event stamps: the same interface, device time. ``external=True`` (graph mode): events
    recorded inside a captured CUDA graph stay timeable after replay; a plain record would become
    an internal graph dependency (``microbench.timing``; commprof refuses graph mode without it)."""

    def __init__(self, torch, nseg: int, external: bool = False):
        E = lambda: timing_event(torch, external)  # noqa: E731
        self.start = [E() for _ in range(nseg)]
        self.end = [E() for _ in range(nseg)]
        self.e0, self.e1 = E(), E()
        self.origin = ORIGIN_TOKEN

    def begin(self):
        self.e0.record()

    def mark(self, j, end=False):
        (self.end if end else self.start)[j].record()

    def finish(self):
        self.e1.record()
        self.e1.synchronize()

    def latency_us(self) -> float:
        """The token's time alone: an untraced step records no segment event, and elapsed_time on
        an event never recorded raises."""
        return self.e0.elapsed_time(self.e1) * 1e3

    def result_us(self):
        """(token latency, [segment start offsets], [segment durations]) in us. In graph mode the
        token's events are recorded outside the graph and the segments' by its nodes; should
        ``elapsed_time`` across the two fail, offsets are taken from the first segment's start and
        the whole rest of the token (launch and tail) is put before it (``origin`` says which)."""
        e0 = self.e0
        lat = e0.elapsed_time(self.e1) * 1e3
        durs = [s.elapsed_time(e) * 1e3 for s, e in zip(self.start, self.end)]
        if self.origin == ORIGIN_TOKEN:
            try:
                return lat, [e0.elapsed_time(s) * 1e3 for s in self.start], durs
            except RuntimeError:
                self.origin = ORIGIN_FIRST_SEGMENT
        first = self.start[0]
        rel = [first.elapsed_time(s) * 1e3 for s in self.start]
        span = first.elapsed_time(self.end[-1]) * 1e3
        lead = max(0.0, lat - span)
        return lat, [lead + r for r in rel], durs


def no_mark(j, end=False):
    return None
