"""busbw and sizes against nccl-tests' definitions (doc/PERFORMANCE.md), and the exact results."""
import math

import pytest
import torch

from commprof.model import collectives
from commprof.model.collectives import COLLECTIVES, DEFAULT_OPS, check_input


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875),
    ("reduce_scatter", 4, 0.75), ("all_to_all", 8, 0.875),
    ("broadcast", 8, 1.0),
])
def test_busbw_factor_matches_nccl_tests(op, n, factor):
    assert COLLECTIVES[op].busbw_factor(n) == pytest.approx(factor)


def test_algbw_and_busbw_from_size_and_time():
    # 1 GB in 1 s is 1 GB/s algbw; an 8-rank all-reduce moves 2*7/8 of it per link.
    alg, bus = COLLECTIVES["all_reduce"].bandwidth_gbps(10**9, 1e6, 8)
    assert alg == pytest.approx(1.0)
    assert bus == pytest.approx(1.75)
    # 256 MiB all-gather (total output) in 2 ms on 4 ranks.
    alg, bus = COLLECTIVES["all_gather"].bandwidth_gbps(256 << 20, 2000.0, 4)
    assert alg == pytest.approx((256 << 20) / 2e-3 / 1e9)
    assert bus == pytest.approx(alg * 3 / 4)
    assert math.isnan(COLLECTIVES["broadcast"].bandwidth_gbps(1024, 0.0, 2)[0])


def test_layout_follows_nccl_tests_size_meaning():
    # all_gather size is the gathered output: each of 8 ranks sends 1/8.
    lay = COLLECTIVES["all_gather"].layout(304128, 8, 2)
    assert (lay.in_numel, lay.out_numel, lay.size_bytes) == (19008, 152064, 304128)
    # reduce_scatter size is the input; the output is one share.
    lay = COLLECTIVES["reduce_scatter"].layout(4096, 4, 2)
    assert (lay.in_numel, lay.out_numel) == (2048, 512)
    # all_reduce is in place on one rank's buffer.
    lay = COLLECTIVES["all_reduce"].layout(10240, 8, 2)
    assert (lay.in_numel, lay.out_numel, lay.size_bytes) == (5120, 0, 10240)
    # A size that does not split evenly is rounded down to a multiple of n elements.
    lay = COLLECTIVES["all_to_all"].layout(100, 8, 4)
    assert lay.in_numel == 24 and lay.size_bytes == 96


def test_expected_results_by_hand():
    a, b = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0, 20.0, 30.0, 40.0])
    c = COLLECTIVES
    assert c["all_reduce"].expected([a, b], 1).tolist() == [11, 22, 33, 44]
    assert c["all_gather"].expected([a[:2], b[:2]], 0).tolist() == [1, 2, 10, 20]
    assert c["reduce_scatter"].expected([a, b], 1).tolist() == [33, 44]
    assert c["all_to_all"].expected([a, b], 0).tolist() == [1, 2, 10, 20]
    assert c["all_to_all"].expected([a, b], 1).tolist() == [3, 4, 30, 40]
    assert c["broadcast"].expected([a, b], 1).tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_check_data_sums_are_exact_and_rank_dependent(dtype):
    xs = [check_input(r, 1000, dtype) for r in range(8)]
    total = COLLECTIVES["all_reduce"].expected(xs, 0)
    exact = sum(x.double() for x in xs)
    assert torch.equal(total.double(), exact)
    assert not torch.equal(xs[0], xs[1])


# --- the table itself: one entry per op, each checked against a reference written here ---

FIVE_OPS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"}

# nccl-tests doc/PERFORMANCE.md, written out again here rather than read from the module.
NCCL_TESTS_BUSBW = {
    "all_reduce": ("2(n-1)/n", lambda n: 2 * (n - 1) / n),
    "all_gather": ("(n-1)/n", lambda n: (n - 1) / n),
    "reduce_scatter": ("(n-1)/n", lambda n: (n - 1) / n),
    "all_to_all": ("(n-1)/n", lambda n: (n - 1) / n),
    "broadcast": ("1", lambda n: 1),
}


def test_registry_has_exactly_the_five_ops():
    assert set(COLLECTIVES) == FIVE_OPS
    assert all(name == c.name for name, c in COLLECTIVES.items())
    assert set(DEFAULT_OPS) <= FIVE_OPS


@pytest.mark.parametrize("op", sorted(FIVE_OPS))
@pytest.mark.parametrize("n", [2, 4, 8])
def test_every_busbw_factor_is_the_nccl_tests_formula(op, n):
    c = COLLECTIVES[op]
    formula, factor = NCCL_TESTS_BUSBW[op]
    assert c.busbw_factor(n) == pytest.approx(factor(n))
    assert c.busbw_formula == formula        # the formula written beside the entry
    alg, bus = c.bandwidth_gbps(8 << 20, 100.0, n)
    assert alg == pytest.approx((8 << 20) / 100e-6 / 1e9)
    assert bus == pytest.approx(alg * factor(n))


def test_module_docstring_table_matches_the_entries():
    rows = {line.split()[0]: line for line in collectives.__doc__.splitlines()
            if line.split() and line.split()[0] in FIVE_OPS}
    assert set(rows) == FIVE_OPS
    for name, c in COLLECTIVES.items():
        assert c.size_meaning in rows[name] and rows[name].rstrip().endswith(c.busbw_formula)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("elem", [2, 4])
@pytest.mark.parametrize("size", [8 << 10, 304128, 1 << 20])
def test_layout_of_each_op_is_its_documented_size(n, elem, size):
    """size_bytes (a multiple of n elements here) is exactly the buffer README names."""
    lay = {op: COLLECTIVES[op].layout(size, n, elem) for op in FIVE_OPS}
    numel = size // elem
    assert all(l.size_bytes == size for l in lay.values())
    # all_reduce: one rank's buffer, reduced in place.
    assert (lay["all_reduce"].in_numel, lay["all_reduce"].out_numel) == (numel, 0)
    # all_gather: the gathered output; each rank sends 1/n of it.
    assert (lay["all_gather"].in_numel, lay["all_gather"].out_numel) == (numel // n, numel)
    # reduce_scatter: the scattered input; each rank keeps 1/n of it.
    assert (lay["reduce_scatter"].in_numel, lay["reduce_scatter"].out_numel) == (numel, numel // n)
    # all_to_all: one rank's send buffer; it receives as much as it sends.
    assert (lay["all_to_all"].in_numel, lay["all_to_all"].out_numel) == (numel, numel)
    # broadcast: the buffer, in place.
    assert (lay["broadcast"].in_numel, lay["broadcast"].out_numel) == (numel, 0)


@pytest.mark.parametrize("op", sorted(FIVE_OPS))
def test_uneven_sizes_round_down_only_for_split_ops(op):
    lay = COLLECTIVES[op].layout(7 * 4 + 4 * 3, 4, 4)        # 10 fp32 elements over 4 ranks
    split = op in ("all_gather", "reduce_scatter", "all_to_all")
    assert lay.size_bytes == (32 if split else 40)
    assert COLLECTIVES[op].layout(1, 8, 2).size_bytes == (16 if split else 2)   # never empty


def _naive(op, inputs, r):
    """Element-by-element reference on plain lists, independent of the module's torch code."""
    xs = [x.tolist() for x in inputs]
    n, m = len(xs), len(xs[0])
    if op == "all_reduce":
        return [sum(x[i] for x in xs) for i in range(m)]
    if op == "broadcast":
        return list(xs[0])
    if op == "all_gather":
        return [v for x in xs for v in x]
    share = m // n
    if op == "reduce_scatter":
        return [sum(x[i] for x in xs) for i in range(r * share, (r + 1) * share)]
    if op == "all_to_all":
        return [x[i] for x in xs for i in range(r * share, (r + 1) * share)]
    raise AssertionError(op)


@pytest.mark.parametrize("op", sorted(FIVE_OPS))
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_expected_is_the_naive_reference(op, n):
    gen = torch.Generator().manual_seed(n)
    lay = COLLECTIVES[op].layout(n * 6 * 4, n, 4)
    inputs = [torch.randint(-50, 50, (lay.in_numel,), generator=gen).float() for _ in range(n)]
    for r in range(n):
        got = COLLECTIVES[op].expected(inputs, r)
        assert got.tolist() == _naive(op, inputs, r)
        assert got.numel() == (lay.out_numel or lay.in_numel)
    # The expected result is a new tensor: the check may scribble on it without touching inputs.
    before = [x.clone() for x in inputs]
    COLLECTIVES[op].expected(inputs, n - 1).fill_(0)
    assert all(torch.equal(a, b) for a, b in zip(inputs, before))


# What each op must call in torch.distributed, and with which buffers (out first, as torch has it).
BINDS = {
    "all_reduce": ("all_reduce", lambda i, o: (i,), {}),
    "all_gather": ("all_gather_single", lambda i, o: (o, i), {}),
    "reduce_scatter": ("reduce_scatter_single", lambda i, o: (o, i), {}),
    "all_to_all": ("all_to_all_single", lambda i, o: (o, i), {}),
    "broadcast": ("broadcast", lambda i, o: (i,), {"src": 5}),
}


@pytest.mark.parametrize("op", sorted(FIVE_OPS))
def test_bind_issues_the_right_torch_call_once(op, monkeypatch):
    import torch.distributed as dist

    calls = []
    fn_name, args_of, extra = BINDS[op]
    monkeypatch.setattr(dist, fn_name, lambda *a, **k: calls.append((a, k)), raising=False)
    inp, out, group = torch.zeros(4), torch.zeros(8), object()
    call = COLLECTIVES[op].bind(inp, out, group, 5)
    assert calls == []                       # binding issues nothing
    call()
    assert len(calls) == 1
    args, kwargs = calls[0]
    assert all(a is b for a, b in zip(args, args_of(inp, out), strict=True))
    assert kwargs == {"group": group, **extra}
