"""busbw and sizes against nccl-tests' definitions (doc/PERFORMANCE.md), and the exact results."""
import math

import pytest
import torch

from commprof.collectives import COLLECTIVES, check_input


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
