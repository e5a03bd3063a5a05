"""An independent expectation for the one-shot all-reduce (``cuda_ext/oneshot_allreduce.cu``), for the tests.

Written from the kernel source and IEEE 754 alone: nothing here imports or calls ``cuda_ext.oneshot``
(not its encode/decode, bf16 helpers, reference_sum or verify), so a bug in those helpers (which
the simulated kernel in ``test_cuda_ext.py`` uses as its dtype conversions) cannot hide in the
expectation as well.

What the kernel computes, per element (``reduce_vectors`` / ``accumulate`` / ``pack``):

* every rank's input is widened to fp32 exactly (bf16: the 16 bits become the top half of an fp32;
  fp16: ``cvt.f32.f16``; fp32: as is);
* ``acc = 0.f`` and then ``acc += x_q`` for q = 0, 1, ..., world-1, each add rounded to fp32 (rank
  order matters: fp32 addition is not associative; ``0.f + -0.f`` is ``+0.f``);
* the fp32 sum is rounded once to the output dtype: bf16 by round-to-nearest-even on the fp32 bit
  pattern (``to_bf16``; a NaN stays a quiet NaN), fp16 by ``cvt.rn.f16.f32`` (nearest even, which
  numpy's float32 -> float16 conversion also does), fp32 as is.

Storage arrays (what the kernel reads and writes) are ``uint16`` bit patterns for bf16, ``float16``
for fp16 and ``float32`` for fp32. Outputs are compared bit for bit.
"""
from __future__ import annotations

import numpy as np

STORAGE = {"bf16": np.uint16, "fp16": np.float16, "fp32": np.float32}

#: Flag-area geometry of the kernel (``oneshot_allreduce.cu``): slot (phase, writer, block) is u32
#: word (phase * 8 + writer) * row_words + block; two phases (entry, exit), rows for 8 writers.
KERNEL_MAX_WORLD = 8
KERNEL_PHASES = 2


def bf16_bits(values) -> np.ndarray:
    """fp32 values -> bf16 bit patterns, round to nearest, ties to even, on the fp32 bit pattern.

    Formulated as "keep the top 16 bits, add one when the dropped 16 bits are more than half, or
    exactly half and the kept part is odd" (the kernel adds a bias instead; the two must agree).
    A carry out of the mantissa rounds into the exponent, so the largest finite values round to inf.
    """
    u = np.ascontiguousarray(np.asarray(values, dtype=np.float32)).view(np.uint32).astype(np.uint64)
    kept, dropped = u >> np.uint64(16), u & np.uint64(0xFFFF)
    up = (dropped > 0x8000) | ((dropped == 0x8000) & ((kept & np.uint64(1)) == 1))
    out = (kept + up.astype(np.uint64)) & np.uint64(0xFFFF)
    nan = (u & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    return np.where(nan, kept | np.uint64(0x40), out).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    """bf16 bit patterns -> fp32 values (exact: the bits are the top half of the fp32)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_storage(values, dtype: str) -> np.ndarray:
    """fp32 values -> the storage array of ``dtype`` (one rounding, nearest even)."""
    v = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
    if dtype == "bf16":
        return bf16_bits(v)
    if dtype == "fp16":
        with np.errstate(over="ignore"):      # beyond 65504 rounds to inf, as cvt.rn.f16.f32 does
            return v.astype(np.float16)
    if dtype == "fp32":
        return v.copy()
    raise ValueError(f"not a one-shot dtype: {dtype!r}")


def storage_values(storage, dtype: str) -> np.ndarray:
    """A storage array of ``dtype`` (any numpy view of its bytes) -> fp32 values, exactly."""
    raw = np.ascontiguousarray(np.asarray(storage)).view(np.uint8)
    if dtype == "bf16":
        return bf16_values(raw.view(np.uint16))
    if dtype == "fp16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "fp32":
        return raw.view(np.float32).copy()
    raise ValueError(f"not a one-shot dtype: {dtype!r}")


def expected_allreduce(inputs, dtype: str) -> np.ndarray:
    """What every rank's output must hold: the storage array of ``dtype``.

    ``inputs``: one storage array per rank, rank order (as the kernel reads them).
    """
    vals = [storage_values(x, dtype) for x in inputs]
    acc = np.zeros(vals[0].shape, np.float32)           # float acc[8] = {0.f, ...}
    for v in vals:                                     # q = 0 .. world-1, one fp32 rounding per add
        acc = np.add(acc, v, dtype=np.float32)
    return to_storage(acc, dtype)


def host_bytes(x) -> bytes:
    """The bytes of a numpy, simulated-cupy or cupy array (``.get()`` copies a device array to the host)."""
    if hasattr(x, "get"):
        x = x.get()
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def assert_allreduce_outputs(outs, inputs, dtype: str, what: str = "") -> None:
    """Every rank's output equals :func:`expected_allreduce` of ``inputs`` bit for bit.

    Raises AssertionError naming the rank, how many elements differ, the first ones and the expectation.
    """
    want = expected_allreduce(inputs, dtype)
    size = np.dtype(STORAGE[dtype]).itemsize
    exp = want.view(np.uint8).reshape(-1, size)
    for rank, out in enumerate(outs):
        got = np.frombuffer(host_bytes(out), dtype=np.uint8)
        assert got.size == exp.size, \
            f"{what}rank {rank}: output has {got.size} bytes, the independent expectation {exp.size}"
        got = got.reshape(-1, size)
        wrong = np.flatnonzero(np.any(got != exp, axis=1))
        if wrong.size:
            first = wrong[:4]
            raise AssertionError(
                f"{what}rank {rank}: {wrong.size} of {len(exp)} {dtype} elements differ from the independent "
                f"fp32 rank-order sum (first at {first.tolist()}: got "
                f"{storage_values(got[first], dtype).tolist()}, want {storage_values(exp[first], dtype).tolist()})")


def rounding_inputs(world: int, n: int, dtype: str, seed: int = 0) -> list:
    """Storage arrays for ``world`` ranks that make rounding and rank order visible (``n`` elements each).

    * elements 0 mod 4: random values of mixed sign and magnitude (2^-6 .. 2^6), so the fp32 sums
      round when narrowed and every dtype conversion is exercised;
    * elements 1 mod 4: rank 0 holds ``m``, rank 1 half a unit in the last place of ``m`` in the
      output dtype (bf16, fp16) or in fp32 (fp32), the other ranks 0: an exact tie, which
      round-to-nearest-even breaks towards the even neighbour (down for even ``m``, up for odd);
    * elements 2 mod 4: rank 0 holds +-1, rank 1 half an ulp of 1 in the output dtype (2^-8 bf16,
      2^-11 fp16, 2^-24 fp32), ranks 2.. 2^-24 each (same sign): in rank order every later add is an
      fp32 tie that rounds back to even, so the result is +-1; with 4 or more ranks, summing the small
      terms first (any other order, e.g. a rank starting from its own input) rounds the other way;
    * elements 3 mod 4: -0 on every rank (``0.f + -0.f`` is +0, so the sum is +0) and, with two or
      more ranks, values that cancel exactly.
    """
    if n % 4:
        raise ValueError("n must be a multiple of 4")
    rng = np.random.default_rng(seed + 1000 * world + {"bf16": 1, "fp16": 2, "fp32": 3}[dtype])
    mant_bits = {"bf16": 7, "fp16": 10, "fp32": 23}[dtype]
    vals = np.zeros((world, n), np.float32)
    k = n // 4
    mags = np.exp2(rng.integers(-6, 7, size=(world, k))).astype(np.float32)
    vals[:, 0::4] = rng.uniform(-1, 1, size=(world, k)).astype(np.float32) * mags
    m = (1 + rng.integers(0, 128, size=k) * 2.0 ** -mant_bits) * np.exp2(rng.integers(-3, 4, size=k))
    vals[0, 1::4] = m
    if world > 1:
        vals[1, 1::4] = np.exp2(np.floor(np.log2(m)) - mant_bits - 1)
    sign = np.where(rng.integers(0, 2, size=k) == 1, -1.0, 1.0)
    vals[0, 2::4] = sign
    if world > 1:
        vals[1, 2::4] = sign * 2.0 ** -(mant_bits + 1)
        vals[2:, 2::4] = sign * 2.0 ** -24
    pairs = np.zeros((world, k), np.float32)
    pairs[:, 0::2] = -0.0
    if world > 1:
        a = rng.integers(1, 50, size=pairs[0, 1::2].shape)
        pairs[0, 1::2], pairs[1, 1::2] = a, -a
    vals[:, 3::4] = pairs
    out = [to_storage(v, dtype) for v in vals]
    structured = np.arange(n) % 4 != 0
    for v, s in zip(vals, out):   # the constructed elements are exact in dtype (the random ones were rounded)
        assert np.array_equal(storage_values(s, dtype)[structured].view(np.uint32), v[structured].view(np.uint32))
    return out


def flag_words(flags_base_words: np.ndarray, row_words: int) -> dict:
    """The flag area of one rank (u32 words, as laid out by the kernel) -> {(phase, writer, block): value}
    for every non-zero slot; a non-zero word outside any slot's range is reported as (None, index)."""
    found = {}
    for index in np.flatnonzero(flags_base_words).tolist():
        row, block = divmod(index, row_words)
        phase, writer = divmod(row, KERNEL_MAX_WORLD)
        key = (phase, writer, block) if phase < KERNEL_PHASES else (None, index)
        found[key] = int(flags_base_words[index])
    return found
