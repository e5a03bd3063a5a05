"""cuda_ext: the kernels compile for sm_80/sm_90/sm_120 (nvcc, no GPU), the one-shot all-reduce's host
logic (layout, limits, eligibility, P2P decision, verify) on CPU, imports without native packages,
and, on a GPU (marked), the same-GPU probes and the one-shot all-reduce run and verify."""
import os
import re
import subprocess
import sys

import pytest

from fake_cupy import TorchStream, kernel_params, sim_custom_setup
from helpers import REPO

from commprof.model.errors import EXIT_DEVICE, DeviceError, RankHung, UsageError
from cuda_ext import loader, oneshot
from cuda_ext.oneshot import PairProbe, RegionLayout, check_eligible, check_size, pair_verdict, verify

ARCHS = ("sm_80", "sm_90", "sm_120")
needs_nvcc = pytest.mark.skipif(loader.find_nvcc() is None,
                                reason="nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): "
                                       "install the CUDA toolkit to run the kernel compile test")


def _source_kernels() -> dict:
    """extern "C" kernel names per source stem, read from the .cu files themselves."""
    found = {}
    for path in loader.sources():
        text = open(path).read()
        names = re.findall(r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+(\w+)\s*\(', text)
        names += re.findall(r"COMMPROF_ONESHOT_KERNEL\((\w+),", text)
        stem = os.path.splitext(os.path.basename(path))[0]
        for n in names:
            if n not in ("NAME", "__launch_bounds__"):
                found[n] = stem
    return found


# ---- (a) compile every kernel for every CI arch -------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles(arch, tmp_path):
    cubins = loader.compile_only(arch, str(tmp_path))
    assert [os.path.basename(c) for c in cubins] == \
        [f"{os.path.splitext(os.path.basename(s))[0]}.{arch}.cubin" for s in loader.sources()]
    for name, stem in loader.KERNELS.items():
        blob = open(os.path.join(str(tmp_path), f"{stem}.{arch}.cubin"), "rb").read()
        assert blob[:4] == b"\x7fELF"
        assert name.encode() in blob, f"{name} missing from {stem}.{arch}.cubin"


# Per-SM limits of the CI archs (CUDA C Programming Guide, "Technical Specifications per Compute
# Capability"): registers, resident threads, resident blocks; registers are allocated per warp in
# units of 256.
SM_LIMITS = {"sm_80": (65536, 2048, 32), "sm_90": (65536, 2048, 32), "sm_120": (65536, 1536, 32)}
REG_UNIT = 256


def _ptxas_report(arch: str, tmp_path) -> dict:
    """{kernel: (registers, spill bytes)} from nvcc -Xptxas -v with the build's own flags."""
    nvcc = loader.find_nvcc()
    out = {}
    for src in loader.sources():
        cmd = loader.nvcc_command(nvcc, src, arch, str(tmp_path / f"{os.path.basename(src)}.{arch}.cubin"))
        res = subprocess.run(cmd + ["-Xptxas", "-v"], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr
        name = None
        for line in res.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\w+)' for '(\w+)'", line)
            if m:
                name = m.group(1)
                assert m.group(2) == arch
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and name:
                out[name] = [None, int(m.group(1)) + int(m.group(2))]
            m = re.search(r"Used (\d+) registers", line)
            if m and name:
                out[name][0] = int(m.group(1))
    return out


def _blocks_per_sm(arch: str, regs: int, threads: int) -> int:
    """Resident blocks per SM as the register file and the thread and block limits allow."""
    reg_file, max_threads, max_blocks = SM_LIMITS[arch]
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    return min(reg_file // (warps * per_warp), max_threads // threads, max_blocks)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_kernel_registers_and_occupancy(arch, tmp_path):
    """What the host code assumes of each kernel's residency, from ptxas' own report: no spills;
    on sm_90 (H100/H200) the copy fills every SM with BLOCKS_PER_SM blocks of COPY_THREADS (32
    registers a thread: 4 x 512 threads is the SM's whole 2048); on sm_80 and sm_120 it takes 40 and
    two blocks are resident (the grid-stride copy needs no co-residency: the other blocks wait their
    turn; forcing 4 with __launch_bounds__(512, 4) spills). The one-shot all-reduce keeps one block
    of THREADS_PER_BLOCK per SM (__launch_bounds__(512, 1)), which the one-GPU emulation's sizing
    (world x SMs // world blocks) relies on, since a spinning block holds its SM."""
    from cuda_ext import probes

    rep = _ptxas_report(arch, tmp_path)
    assert set(rep) == set(loader.KERNELS)
    for name, (regs, spill) in rep.items():
        assert regs is not None and spill == 0, (arch, name, regs, spill)
    copy_fit = _blocks_per_sm(arch, rep["commprof_p2p_copy"][0], probes.COPY_THREADS)
    assert copy_fit >= (probes.BLOCKS_PER_SM if arch == "sm_90" else 2), (arch, rep)
    for dt in ("bf16", "fp16", "fp32"):
        assert _blocks_per_sm(arch, rep[f"commprof_oneshot_allreduce_{dt}"][0], oneshot.THREADS_PER_BLOCK) >= 1
    assert rep["commprof_spin"][0] <= 32 and rep["commprof_pingpong"][0] <= 32
    # the emulation's sizing on an H200 (132 SMs): 8 ranks x 16 blocks, at one block per SM, all resident
    for world in range(1, oneshot.MAX_WORLD + 1):
        blocks = max(1, min(oneshot.DEFAULT_MAX_BLOCKS, 132 // world))
        assert world * blocks <= 132


def test_kernel_table_matches_sources():
    assert _source_kernels() == loader.KERNELS
    assert [os.path.basename(s) for s in loader.sources()] == ["oneshot_allreduce.cu", "p2p_probes.cu"]
    for path in loader.sources():   # no headers: NVRTC compiles them without an include path
        assert "#include" not in open(path).read()


def test_kernel_constants_match_host_layout():
    text = open(os.path.join(REPO, "cuda_ext", "oneshot_allreduce.cu")).read()
    assert f"#define COMMPROF_MAX_WORLD {oneshot.MAX_WORLD}" in text
    assert f"__launch_bounds__({oneshot.THREADS_PER_BLOCK}, 1)" in text


@needs_nvcc
def test_build_caches_by_sources_arch_and_nvcc(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    d = loader.build("sm_90")
    assert d.startswith(str(tmp_path / "cache" / "cuda_ext" / "sm_90-"))
    assert sorted(os.listdir(d)) == ["build.json", "oneshot_allreduce.sm_90.cubin", "p2p_probes.sm_90.cubin"]
    stamp = os.path.getmtime(os.path.join(d, "build.json"))
    assert loader.build("sm_90") == d and os.path.getmtime(os.path.join(d, "build.json")) == stamp
    assert loader.build("90", force=True) == d
    assert not [n for n in os.listdir(os.path.dirname(d)) if n.startswith(".")]   # no temp dirs left


def test_cache_key_and_paths(tmp_path, monkeypatch):
    k = loader.cache_key("sm_90", "nvcc 13.0")
    assert k == loader.cache_key("9.0", "nvcc 13.0")
    assert k != loader.cache_key("sm_80", "nvcc 13.0") and k != loader.cache_key("sm_90", "nvcc 12.8")
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path))
    assert loader.cache_root() == os.path.join(str(tmp_path), "cuda_ext")
    monkeypatch.delenv("COMMPROF_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert loader.cache_root() == os.path.join(str(tmp_path / "xdg"), "commprof", "cuda_ext")
    cmd = loader.nvcc_command("nvcc", "x.cu", "9.0", "x.cubin")
    assert cmd == ["nvcc", "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-lineinfo", "-o", "x.cubin", "x.cu"]


@pytest.mark.parametrize("given,want", [("sm_90", "sm_90"), ("90", "sm_90"), ("9.0", "sm_90"),
                                        ("compute_120", "sm_120"), ("12.0", "sm_120"), ("sm_90a", "sm_90a")])
def test_normalize_arch(given, want):
    assert loader.normalize_arch(given) == want


def test_errors_name_what_is_missing(monkeypatch):
    assert issubclass(loader.CudaUnavailable, DeviceError)
    assert loader.CudaUnavailable("x").exit_code == EXIT_DEVICE == 3
    with pytest.raises(loader.CudaUnavailable, match="unknown GPU architecture 'hopper'"):
        loader.normalize_arch("hopper")
    monkeypatch.setattr(loader, "find_nvcc", lambda: None)
    with pytest.raises(loader.CudaUnavailable) as e:
        loader.build("sm_90")
    assert str(e.value) == (f"nvcc not found: install the CUDA toolkit or cupy "
                            f"({loader.gpu_install_hint(loader.torch_cuda_version())})")
    with pytest.raises(loader.CudaUnavailable, match="nvcc not found"):
        loader.compile_only("sm_90", "/nonexistent")
    with pytest.raises(loader.CudaUnavailable, match="unknown CUDA backend 'hip'"):
        loader.load(backend="hip")


@needs_nvcc
def test_nvcc_failure_is_one_line(tmp_path, monkeypatch):
    bad = tmp_path / "src"
    bad.mkdir()
    (bad / "broken.cu").write_text('extern "C" __global__ void k() { this is not cuda; }\n')
    monkeypatch.setattr(loader, "SOURCE_DIR", str(bad))
    with pytest.raises(loader.CudaUnavailable) as e:
        loader.compile_only("sm_90", str(tmp_path / "out"))
    msg = str(e.value)
    assert msg.startswith("nvcc failed on broken.cu for sm_90:") and "\n" not in msg


class _FakeCupy:
    """Just enough of cupy for load(): a GPU of compute capability 9.0, modules that record how made."""

    def __init__(self, devices=1):
        import types

        made = self.made = []

        class RawModule:
            def __init__(self, code=None, *, path=None, options=(), backend="nvrtc"):
                made.append({"code": code, "path": path, "options": options, "backend": backend})

            def get_function(self, name):
                return ("kernel", name)

        class Device:
            compute_capability = "90"

            def __init__(self, i=0):
                self.id = i

        self.RawModule = RawModule
        self.cuda = types.SimpleNamespace(Device=Device,
                                          runtime=types.SimpleNamespace(getDeviceCount=lambda: devices))


def test_load_picks_nvcc_cubins_else_nvrtc(tmp_path, monkeypatch):
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(loader, "_LOADED", {})
    monkeypatch.delenv("COMMPROF_CUDA_BACKEND", raising=False)
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path))
    # no nvcc: cupy's NVRTC compiles the sources themselves
    monkeypatch.setattr(loader, "find_nvcc", lambda: None)
    k = loader.load()
    assert (k.backend, k.arch, k.directory) == ("nvrtc", "sm_90", None)
    assert [m["backend"] for m in fake.made] == ["nvrtc", "nvrtc"] and all(m["code"] for m in fake.made)
    assert k.get_function("commprof_pingpong") == ("kernel", "commprof_pingpong")
    with pytest.raises(KeyError, match="no CUDA kernel named 'nope'"):
        k.get_function("nope")
    assert loader.load() is k
    # forcing nvcc without one says so
    with pytest.raises(loader.CudaUnavailable, match="nvcc not found"):
        loader.load(backend="nvcc")


@needs_nvcc
def test_load_uses_nvcc_cubins_when_nvcc_is_there(tmp_path, monkeypatch):
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(loader, "_LOADED", {})
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COMMPROF_CUDA_BACKEND", "auto")
    k = loader.load()
    assert (k.backend, k.arch) == ("nvcc", "sm_90") and k.directory.startswith(str(tmp_path))
    assert [os.path.basename(m["path"]) for m in fake.made] == \
        ["oneshot_allreduce.sm_90.cubin", "p2p_probes.sm_90.cubin"]
    assert all(os.path.isfile(m["path"]) for m in fake.made)
    monkeypatch.setenv("COMMPROF_CUDA_BACKEND", "nvrtc")
    assert loader.load().backend == "nvrtc"


def test_load_without_a_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy(devices=0))
    with pytest.raises(loader.CudaUnavailable) as e:
        loader.load()
    assert str(e.value) == "no CUDA GPU visible (cupy sees 0 devices): run on a machine with an NVIDIA GPU"
    assert e.value.exit_code == 3


# ---- (b) host-side logic of the one-shot all-reduce ---------------------------------------------

def test_region_layout_alignment_and_no_overlap():
    for max_bytes, max_blocks in ((8 << 20, 32), (48, 1), (1 << 20, 33), (16, 1024)):
        lay = RegionLayout(max_bytes, max_blocks)
        assert lay.input_offset == 0 and lay.input_bytes >= max_bytes and lay.input_bytes % 16 == 0
        assert lay.flags_offset % 128 == 0 and lay.row_bytes % 128 == 0 and lay.status_offset % 128 == 0
        assert lay.row_words >= max_blocks and lay.row_words * 4 == lay.row_bytes
        first = lay.flag_offset(0, 0, 0)
        last = lay.flag_offset(1, oneshot.MAX_WORLD - 1, max_blocks - 1)
        assert first == lay.flags_offset and last + 4 <= lay.status_offset
        assert lay.status_offset + 4 <= lay.total_bytes
        slots = {lay.flag_offset(p, w, b) for p in range(2) for w in range(8) for b in range(max_blocks)}
        assert len(slots) == 2 * 8 * max_blocks           # every slot distinct
        for p in range(2):
            for w in range(8):
                assert lay.flag_offset(p, w, 0) % 128 == 0  # each row on its own 128-byte line(s)
    lay = RegionLayout()
    assert (lay.max_bytes, lay.max_blocks, lay.row_words) == (8 << 20, 32, 32)
    assert lay.total_bytes == (8 << 20) + 2 * 8 * 128 + 128
    # the kernel's formula: word (phase * 8 + writer) * row_words + block
    assert lay.flag_offset(1, 3, 5) == lay.flags_offset + 4 * ((1 * 8 + 3) * lay.row_words + 5)


def test_region_layout_refuses_bad_limits():
    for kwargs in ({"max_bytes": 0}, {"max_bytes": 24}, {"max_bytes": -16}, {"max_blocks": 0},
                   {"max_blocks": 2048}):
        with pytest.raises(UsageError):
            RegionLayout(**kwargs)
    with pytest.raises(IndexError):
        RegionLayout().flag_offset(2, 0, 0)
    with pytest.raises(IndexError):
        RegionLayout().flag_offset(0, 8, 0)
    with pytest.raises(IndexError):
        RegionLayout(max_blocks=4).flag_offset(0, 0, 4)


def test_launch_config():
    assert oneshot.launch_config(16) == (1, 512)
    assert oneshot.launch_config(10240) == (2, 512)            # 640 vectors
    assert oneshot.launch_config(8 << 20) == (32, 512)         # capped, the kernel loops
    assert oneshot.launch_config(8 << 20, RegionLayout(max_blocks=8)) == (8, 512)


@pytest.mark.parametrize("nbytes,dtype,want", [
    (10240, "bf16", ""),
    (16, "fp32", ""),
    (8 << 20, "fp16", ""),
    (10, "bf16", "message of 10 bytes is not a multiple of 16 bytes (8 bf16 elements)"),
    (24, "fp32", "message of 24 bytes is not a multiple of 16 bytes (4 fp32 elements)"),
    ((8 << 20) + 16, "bf16", "exceeds the one-shot limit of 8 MiB"),
    (0, "bf16", "needs a positive size"),
    (1024, "int8", "dtype int8 is not supported by the one-shot all-reduce (bf16, fp16, fp32)"),
])
def test_check_size(nbytes, dtype, want):
    got = check_size(nbytes, dtype)
    assert (got == "") if want == "" else (want in got)


def test_check_size_custom_limit():
    assert "exceeds the one-shot limit of 64 KiB" in check_size(128 << 10, "bf16", max_bytes=64 << 10)


def _ok(world):
    return [[True] * world for _ in range(world)]


def test_check_eligible_ok_and_every_reason():
    ok, why = check_eligible(10240, 4, "bf16", _ok(4))
    assert ok and why == "eligible: 4 ranks, bf16, 10 KiB, every pair P2P-verified"
    assert check_eligible(16, 8, "torch.float32", _ok(8))[0]
    cases = [
        ((10, 2, "bf16", _ok(2)), "not a multiple of 16 bytes"),
        ((16 << 20, 2, "bf16", _ok(2)), "exceeds the one-shot limit of 8 MiB"),
        ((1024, 1, "bf16", _ok(1)), "1 ranks: the one-shot all-reduce supports 2 to 8"),
        ((1024, 9, "bf16", _ok(9)), "9 ranks: the one-shot all-reduce supports 2 to 8"),
        ((1024, 2, "int8", _ok(2)), "dtype int8 is not supported"),
        ((1024, 2, "bf16", None), "no P2P probe was run"),
        ((1024, 4, "bf16", _ok(2)), "P2P matrix is not 4 x 4"),
    ]
    for args, reason in cases:
        ok, why = check_eligible(*args)
        assert not ok and reason in why and "\n" not in why, (args, why)
    m = _ok(4)
    m[2][3] = False                 # one direction of one pair is enough to refuse
    ok, why = check_eligible(1024, 4, "bf16", m)
    assert not ok and why == "P2P between ranks 2 and 3 not verified"
    m = _ok(3)
    m[1][1] = False                 # the diagonal is never consulted
    assert check_eligible(1024, 3, "fp16", m)[0]


def test_check_eligible_with_limit():
    assert not check_eligible(1 << 20, 2, "bf16", _ok(2), max_bytes=512 << 10)[0]
    assert check_eligible(512 << 10, 2, "bf16", _ok(2), max_bytes=512 << 10)[0]


def test_pair_verdict_never_trusts_the_driver_alone():
    assert pair_verdict(PairProbe(0, 1, True, True, True)) == (True, "P2P GPU 0 -> GPU 1 verified (write and read)")
    assert pair_verdict(PairProbe(2, 2, False))[0]
    cases = [
        (PairProbe(0, 1, True), "claimed by the driver but not verified (probe not run)"),
        (PairProbe(0, 1, True, write_ok=True), "not verified"),
        (PairProbe(0, 1, False), "driver reports no P2P access from GPU 0 to GPU 1"),
        (PairProbe(0, 1, True, False, True), "P2P write GPU 0 -> GPU 1 read back wrong data"),
        (PairProbe(0, 1, True, True, False), "P2P read by GPU 0 from GPU 1 returned wrong data"),
        (PairProbe(3, 1, True, error="cudaErrorPeerAccessUnsupported"),
         "P2P probe GPU 3 -> GPU 1 failed: cudaErrorPeerAccessUnsupported"),
    ]
    for probe, reason in cases:
        ok, why = pair_verdict(probe)
        assert not ok and reason in why, why
        assert probe.ok is False and probe.reason == why


def _fake_probes(devices, bad=()):
    """What probe_pairs would return on a box whose `bad` ordered pairs fail verification."""
    return [[PairProbe(a, b, True, (a, b) not in bad, True) if a != b else PairProbe(a, a, True, True, True)
             for b in devices] for a in devices]


def test_p2p_decision_from_fake_probe_results():
    devices = [4, 5, 6, 7]           # a TP=4 group on the second half of a box
    probes = _fake_probes(devices)
    assert oneshot.p2p_matrix(probes) == _ok(4)
    assert check_eligible(4096, 4, "bf16", probes)[0]
    probes = _fake_probes(devices, bad={(6, 4)})
    matrix = oneshot.p2p_matrix(probes)
    assert matrix[2][0] is False and matrix[0][2] is True
    ok, why = check_eligible(4096, 4, "bf16", probes)
    assert not ok and why == ("P2P write GPU 6 -> GPU 4 read back wrong data (the driver claims P2P works)")
    # the driver says yes everywhere but nobody probed: refused
    unprobed = [[PairProbe(a, b, True) for b in devices] for a in devices]
    assert "not verified (probe not run)" in check_eligible(4096, 4, "bf16", unprobed)[1]
    with pytest.raises(UsageError, match="expected a bool or a PairProbe"):
        check_eligible(4096, 2, "bf16", [[True, "yes"], [True, True]])


def test_dtype_names():
    for given, want in (("bf16", "bf16"), ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("half", "fp16"),
                        ("float16", "fp16"), ("float32", "fp32"), ("FP32", "fp32")):
        assert oneshot.dtype_name(given) == want
    with pytest.raises(UsageError, match="dtype fp8 is not supported"):
        oneshot.dtype_name("fp8")


def test_bf16_rounding_matches_torch():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(4096).astype(np.float32) * 100,
                        np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -0.0, 65504.0, 3.0e38, 1e-40,
                                  np.inf, -np.inf], np.float32)])
    ours = oneshot.to_bf16_bits(x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours, theirs)
    assert np.array_equal(oneshot.from_bf16_bits(ours), torch.from_numpy(x).to(torch.bfloat16).float().numpy())
    assert np.isnan(oneshot.from_bf16_bits(oneshot.to_bf16_bits(np.array([np.nan], np.float32)))[0])


def test_verify_exact_fp32_and_tolerant_16_bit():
    np = pytest.importorskip("numpy")
    inputs = [oneshot.rank_pattern(r, 1000) for r in range(8)]
    expected = oneshot.reference_sum(inputs, "fp32")
    assert np.array_equal(expected, np.sum(np.stack(inputs), axis=0))   # small integers: exact
    assert set(np.unique(inputs[0])) <= set(range(-7, 8)) and np.abs(expected).max() <= 56
    assert verify(expected.astype(np.float32), expected, "fp32") == 0
    off = expected.astype(np.float32).copy()
    off[[3, 700]] += np.float32(2 ** -20)      # tiny, but fp32 compares exactly
    assert verify(off, expected, "fp32") == 2
    # bf16 as kernel output bits, compared with a tolerance
    bits = oneshot.encode(expected, "bf16")
    assert bits.dtype == np.uint16 and verify(bits, expected, "bf16") == 0
    near = oneshot.from_bf16_bits(bits) * np.float32(1 + 2 ** -8)
    assert verify(near, expected, "bf16") == 0
    far = oneshot.from_bf16_bits(bits).copy()
    far[10] += 1.0
    assert verify(far, expected, "bf16") == 1
    half = oneshot.encode(expected, "fp16")
    assert half.dtype == np.float16 and verify(half, expected, "fp16") == 0
    assert verify(half.view(np.uint16), expected, "fp16") == 0      # raw fp16 bits work too
    # NaN agrees only with NaN; a length mismatch is all wrong
    a = np.array([np.nan, 1.0], np.float32)
    assert verify(a, np.array([np.nan, 1.0]), "fp32") == 0 and verify(a, np.array([0.0, 1.0]), "fp32") == 1
    assert verify(np.zeros(3, np.float32), np.zeros(5), "fp32") == 5
    assert verify(far, expected, "bf16", atol=2.0, rtol=0.0) == 0


def test_verify_takes_torch_tensors():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    inputs = [oneshot.rank_pattern(r, 64) for r in range(4)]
    expected = oneshot.reference_sum(inputs, "bf16")
    t = torch.stack([torch.from_numpy(x) for x in inputs]).sum(0).to(torch.bfloat16)
    assert verify(t, expected, "bf16") == 0
    t[5] += 8
    assert verify(t, expected, "bf16") == 1
    assert np.array_equal(oneshot.reference_sum(inputs, "bf16"), oneshot.reference_sum(inputs, "fp32"))


# ---- (b') the GPU-side host code (probes, probe_pairs, the one-shot launcher) on a simulated GPU -----

# The simulator (SimCupy, the `sim` fixture in conftest.py) lives in tests/fake_cupy.py.

def test_sim_kernel_signatures_are_parsed():
    assert kernel_params() == {
        "commprof_p2p_copy": ["ptr", "ptr", "u64"],
        "commprof_pingpong": ["ptr", "ptr", "int", "int", "u64", "ptr"],
        "commprof_spin": ["u64"],
        **{f"commprof_oneshot_allreduce_{d}": ["ptr", "ptr", "ptr", "u64", "int", "int", "u32", "u32", "u64", "ptr"]
           for d in ("bf16", "fp16", "fp32")}}


# The simulated kernel converts dtypes with cuda_ext.oneshot's decode/encode; every expectation below
# comes from tests/oneshot_reference.py instead (numpy and the .cu source only), so a bug in those
# helpers, or in oneshot.reference_sum / verify, cannot pass by being on both sides of the comparison.
# The verify(..., reference_sum(...)) assertions are kept as well: they check the helpers agree.

def _sim_allreduce(inputs, dtype, calls=3):
    """The one-shot all-reduce of `inputs` (storage arrays, one per rank) through the module's host code
    (emulate_on_one_gpu: regions, launches, barriers) on the simulated GPU; each rank's output."""
    from cuda_ext.loader import require_gpu

    cupy = require_gpu()
    return oneshot.emulate_on_one_gpu([cupy.asarray(x) for x in inputs], dtype, calls=calls)


def _check_sim_allreduce(inputs, dtype, calls=3):
    """Run :func:`_sim_allreduce` and judge it against the independent expectation only."""
    import oneshot_reference as ref

    outs = _sim_allreduce(inputs, dtype, calls)
    ref.assert_allreduce_outputs(outs, inputs, dtype, what=f"{dtype}, {len(inputs)} ranks: ")
    return outs


@pytest.mark.parametrize("world", [1, 8])
def test_sim_oneshot_timed_emulation_spins_first_and_verifies(sim, world):
    """time_on_one_gpu (the GPU check's custom-vs-NCCL figure): every rank's stream is held by
    commprof_spin before its launch, each call is timed per rank, and the outputs still verify."""
    import oneshot_reference as ref

    n = 10240 // 2
    inputs = [ref.to_storage(oneshot.rank_pattern(r, n), "bf16") for r in range(world)]
    res = oneshot.time_on_one_gpu([sim.asarray(x) for x in inputs], "bf16", iters=3, spin_us=200)
    ref.assert_allreduce_outputs(res["outputs"], inputs, "bf16", what=f"timed, {world} ranks: ")
    assert len(res["transfer_us"]) == len(res["slowest_us"]) == 3
    assert all(0 <= a <= b for a, b in zip(res["transfer_us"], res["slowest_us"]))
    names = [entry[0] for entry in sim.launches]
    assert names.count("commprof_spin") == 3 * world
    for i, name in enumerate(names):                 # each rank's kernel right after its spin
        if name.startswith("commprof_oneshot"):
            assert names[i - 1] == "commprof_spin"


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_sim_oneshot_emulation_verifies(sim, dtype, world):
    import oneshot_reference as ref

    for nbytes in (16, 10240):
        n = nbytes // oneshot.DTYPES[dtype]
        host = [oneshot.rank_pattern(r, n) for r in range(world)]
        inputs = [ref.to_storage(x, dtype) for x in host]     # small integers: exact in every dtype
        outs = _check_sim_allreduce(inputs, dtype, calls=3)    # independent: bit for bit
        expected = oneshot.reference_sum(host, dtype)
        assert [verify(o, expected, dtype, atol=0.0, rtol=0.0) for o in outs] == [0] * world
    launches = [entry for entry in sim.launches if entry[0].startswith("commprof_oneshot")]
    assert len(launches) == 2 * 3 * world and {entry[3] for entry in launches} == {(512,)}
    assert not sim.keep                       # every region freed


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_sim_oneshot_rounds_in_rank_order_like_the_kernel(sim, dtype, world):
    """Inputs where the rounding mode, the rank order and signed zeros all show in the output
    (``oneshot_reference.rounding_inputs``), judged bit for bit against numpy's fp32 rank-order sum."""
    import numpy as np

    import oneshot_reference as ref

    n = 10240 // oneshot.DTYPES[dtype]
    inputs = ref.rounding_inputs(world, n, dtype)
    outs = _check_sim_allreduce(inputs, dtype, calls=2)
    # the data does what it is for: a tie rounded to even, an order-dependent sum, a signed zero
    got = ref.storage_values(np.frombuffer(ref.host_bytes(outs[0]), np.uint8), dtype)
    assert not np.signbit(got[3::4]).any() and not got[3::4].any()   # -0 everywhere, and a - a, sum to +0
    if world >= 4:                                      # summed in reverse, the small terms round the other way
        vals = [ref.storage_values(x, dtype) for x in inputs]
        backwards = np.zeros(n, np.float32)
        for v in vals[::-1]:
            backwards = np.add(backwards, v, dtype=np.float32)
        assert not np.array_equal(ref.to_storage(backwards, dtype).view(np.uint8),
                                  ref.expected_allreduce(inputs, dtype).view(np.uint8))


#: Subtle bugs in the helpers the simulated kernel takes from cuda_ext.oneshot (its dtype conversions),
#: each as (what, which helper, the buggy replacement given the real one, the dtypes it affects).
def _bf16_truncate(real):
    def encode(x, dtype):
        import numpy as np

        if oneshot.dtype_name(dtype) != "bf16":
            return real(x, dtype)
        u = np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32)
        return (u >> 16).astype(np.uint16)             # rounds toward zero instead of to nearest even
    return encode


def _bf16_ties_away(real):
    def encode(x, dtype):
        import numpy as np

        if oneshot.dtype_name(dtype) != "bf16":
            return real(x, dtype)
        u = np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32).astype(np.uint64)
        return ((u + 0x8000) >> 16).astype(np.uint16)  # ties away from zero instead of to even
    return encode


def _fp16_toward_zero(real):
    def encode(x, dtype):
        import numpy as np

        if oneshot.dtype_name(dtype) != "fp16":
            return real(x, dtype)
        x = np.asarray(x, np.float32)
        h = x.astype(np.float16)
        over = np.abs(h.astype(np.float32)) > np.abs(x)
        return np.where(over, np.nextafter(h, np.float16(0)), h).astype(np.float16)
    return encode


def _bf16_decode_half_ulp(real):
    def decode(x, dtype):
        import numpy as np

        a = np.asarray(x)
        if oneshot.dtype_name(dtype) == "bf16" and a.dtype == np.uint16:
            return ((a.astype(np.uint32) << 16) | 0x8000).view(np.float32).astype(np.float64).ravel()
        return real(x, dtype)                          # reads bf16 half a bf16 ulp too large
    return decode


def _lanes_swapped(real):
    def decode(x, dtype):
        a = real(x, dtype)
        return a.reshape(-1, 2)[:, ::-1].ravel().copy()   # the two halves of each 32-bit word swapped
    return decode


def _decode_via_fp16(real):
    def decode(x, dtype):
        import numpy as np

        return real(x, dtype).astype(np.float16).astype(np.float64)   # a narrowing round trip
    return decode


SHARED_HELPER_BUGS = [
    ("bf16 encode truncates", "encode", _bf16_truncate, ("bf16",)),
    ("bf16 encode rounds ties away from zero", "encode", _bf16_ties_away, ("bf16",)),
    ("fp16 encode rounds toward zero", "encode", _fp16_toward_zero, ("fp16",)),
    ("bf16 decode half an ulp high", "decode", _bf16_decode_half_ulp, ("bf16",)),
    ("decode swaps the lanes of a word", "decode", _lanes_swapped, ("bf16", "fp16", "fp32")),
    ("decode narrows fp32 to fp16", "decode", _decode_via_fp16, ("fp32",)),
]


@pytest.mark.parametrize("what,helper,bug,dtypes", SHARED_HELPER_BUGS, ids=[b[0] for b in SHARED_HELPER_BUGS])
def test_sim_independent_check_catches_a_bug_in_the_shared_helpers(sim, monkeypatch, what, helper, bug, dtypes):
    """A deliberate bug in the conversions the simulated kernel takes from cuda_ext.oneshot makes the
    simulated all-reduce check fail: its expectation does not go through them."""
    import oneshot_reference as ref

    for dtype in dtypes:
        inputs = ref.rounding_inputs(4, 512, dtype, seed=7)
        _check_sim_allreduce(inputs, dtype, calls=1)            # fine with the real helpers
        with monkeypatch.context() as mp:
            mp.setattr(oneshot, helper, bug(getattr(oneshot, helper)))
            with pytest.raises(AssertionError, match="differ from the independent fp32 rank-order sum"):
                _check_sim_allreduce(inputs, dtype, calls=1)
    assert not sim.keep


def test_sim_independent_check_uses_no_module_helper(sim, monkeypatch):
    """The expectation never calls cuda_ext.oneshot's conversions or checks: with all of them broken
    after the run, a correct run still passes; and oneshot_reference imports nothing of commprof."""
    import ast

    import oneshot_reference as ref

    inputs = ref.rounding_inputs(3, 256, "bf16", seed=3)
    outs = _sim_allreduce(inputs, "bf16", calls=1)

    def broken(*a, **k):
        raise RuntimeError("the independent check called a cuda_ext.oneshot helper")
    for name in ("encode", "decode", "to_bf16_bits", "from_bf16_bits", "reference_sum", "verify", "rank_pattern",
                 "dtype_name"):
        monkeypatch.setattr(oneshot, name, broken)
    ref.assert_allreduce_outputs(outs, inputs, "bf16")
    tree = ast.parse(open(ref.__file__).read())
    imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"__future__", "numpy"}


def test_independent_reference_against_torch_and_by_hand():
    """oneshot_reference itself: bf16 rounding equals torch's, fp16 is numpy's, a few sums by hand;
    and cuda_ext.oneshot's encode/reference_sum agree with it bit for bit."""
    np = pytest.importorskip("numpy")
    import oneshot_reference as ref

    # by hand: ties go to the even neighbour, more than half goes up, a NaN stays a quiet NaN
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -(1 + 2 ** -8), 3.4028235e38, -0.0],
                 np.float32)
    assert ref.bf16_bits(x).tolist() == [0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F80, 0x8000]
    assert ref.bf16_bits(np.array([np.nan], np.float32))[0] & 0x7FC0 == 0x7FC0
    assert ref.bf16_values(np.array([0x3F80, 0xC040], np.uint16)).tolist() == [1.0, -3.0]
    # rank order: element 0 is ((0 + 1) + 2^-24) + 2^-24, each add a tie that rounds back to 1; element 2
    # holds the same values in another order and the small terms add up first
    ranks = [ref.to_storage(np.array(v, np.float32), "fp32") for v in
             ([1.0, 1.0, 2.0 ** -24], [2.0 ** -24, 2.0 ** -24, 2.0 ** -24], [2.0 ** -24, 2.0 ** -23, 1.0])]
    assert ref.expected_allreduce(ranks, "fp32").tolist() == [1.0, 1.0 + 2 ** -23, 1.0 + 2 ** -23]
    assert np.signbit(ref.expected_allreduce([np.array([-0.0], np.float32)], "fp32")).tolist() == [False]
    # against torch, when installed
    rng = np.random.default_rng(5)
    y = np.concatenate([rng.standard_normal(20000).astype(np.float32) * 100,
                        rng.standard_normal(2000).astype(np.float32) * 1e-30, x])
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        theirs = torch.from_numpy(y).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(ref.bf16_bits(y), theirs)
        assert np.array_equal(ref.to_storage(y, "fp16"), torch.from_numpy(y).to(torch.float16).numpy())
    # the module's helpers agree with the independent ones (each compared on its own, not through the other)
    for dtype in ("bf16", "fp16", "fp32"):
        with np.errstate(over="ignore"):
            mine = np.asarray(oneshot.encode(y, dtype))
        assert np.array_equal(mine.view(np.uint8), ref.to_storage(y, dtype).view(np.uint8)), dtype
        for world in (1, 3, 8):
            inputs = ref.rounding_inputs(world, 256, dtype)
            host = [ref.storage_values(v, dtype) for v in inputs]
            want = ref.storage_values(ref.expected_allreduce(inputs, dtype), dtype).astype(np.float64)
            assert np.array_equal(oneshot.reference_sum(host, dtype), want), (dtype, world)


def test_sim_oneshot_epochs_and_flag_slots(sim):
    import numpy as np

    kernels = loader.load()
    lay = RegionLayout(max_bytes=4096, max_blocks=4)
    regions = [oneshot.Region(lay, 0) for _ in range(2)]
    bases = [r.ptr for r in regions]
    ranks = [oneshot.OneShotAllReduce(kernels, regions[q], q, 2, bases) for q in range(2)]
    xs = [sim.asarray(np.full(1024, q + 1, np.float32)) for q in range(2)]
    outs = [sim.zeros(1024, np.float32) for _ in range(2)]
    for _ in range(5):
        for q in range(2):
            ranks[q].launch(xs[q].data.ptr, outs[q].data.ptr, 4096, "fp32", sim.cuda.Stream(non_blocking=True))
    sim.flush()
    assert [r.epoch for r in ranks] == [5, 5] and [r.status() for r in ranks] == [0, 0]
    assert all(np.array_equal(o, np.full(1024, 3, np.float32)) for o in outs)
    blocks = oneshot.launch_config(4096, lay)[0]
    assert blocks == 1
    for q in range(2):       # both phases' slots of both writers hold the last epoch, nothing else was touched
        for phase in range(2):
            for w in range(2):
                assert sim.u32(regions[q].ptr + lay.flag_offset(phase, w, 0)) == 5
        assert sim.u32(regions[q].ptr + lay.flag_offset(0, 2, 0)) == 0
        assert sim.u32(regions[q].ptr + lay.flag_offset(0, 0, 1)) == 0
    _assert_flag_area(sim, regions, lay, world=2, blocks=1, epoch=5)
    ranks[0].epoch = 0xFFFFFFFF              # the epoch wraps to 1, never 0
    assert ranks[0].next_epoch() == 1
    for r in regions:
        r.close()


def _assert_flag_area(sim, regions, lay, world, blocks, epoch):
    """Per the .cu: after calls up to `epoch`, each rank's whole flag area holds exactly the slots
    (phase, writer, block) of the `world` writers and `blocks` blocks, each at `epoch`, and nothing
    else; its status word is 0. Slot (phase, writer, block) is u32 word (phase * 8 + writer) *
    row_words + block from the area's start (the kernel's flag_ptrs[q], region + flags_offset)."""
    import numpy as np

    import oneshot_reference as ref

    words = 2 * 8 * lay.row_words
    want = {(p, w, b): epoch for p in range(2) for w in range(world) for b in range(blocks)}
    for q, region in enumerate(regions):
        area = np.frombuffer(sim.ct.string_at(region.ptr + lay.flags_offset, 4 * words), np.uint32)
        assert ref.flag_words(area, lay.row_words) == want, f"rank {q}'s flag area"
        assert sim.u32(region.ptr + lay.status_offset) == 0, f"rank {q}'s status word"


def test_sim_oneshot_reads_each_call_after_its_entry_barrier(sim):
    """The protocol's observable effects, with a late rank and a slow reader: every call's output is the
    independent sum of *that* call's inputs; each read of a peer's buffer comes after every rank arrived
    at that call's entry barrier and sees the peer's input for that call (not the one before or after:
    the exit barrier keeps a rank from reusing its buffer while a peer reads it); every flag slot ends
    at the last epoch."""
    import numpy as np

    import oneshot_reference as ref

    world, calls, dtype, nbytes = 3, 4, "bf16", 40960
    lay = RegionLayout(max_bytes=nbytes, max_blocks=4)
    blocks = min(lay.max_blocks, -(-(nbytes // 16) // 512))      # one block per 512 vectors, capped: 4
    kernels = loader.load()
    regions = [oneshot.Region(lay, 0) for _ in range(world)]
    ranks = [oneshot.OneShotAllReduce(kernels, regions[q], q, world, [r.ptr for r in regions]) for q in range(world)]
    n = nbytes // 2
    inputs = [ref.rounding_inputs(world, n, dtype, seed=100 + c) for c in range(calls)]   # different every call
    xs = [[sim.asarray(x) for x in call] for call in inputs]
    outs = [[sim.zeros(n, np.uint16) for _ in range(world)] for _ in range(calls)]
    streams = [sim.cuda.Stream(non_blocking=True) for _ in range(world)]

    def late(steps):
        for _ in range(steps):
            yield
    sim._enqueue(streams[2], late(40))       # rank 2 starts late ...
    sim.slow[1] = 25                         # ... and rank 1 reads slowly
    for c in range(calls):
        for q in range(world):
            ranks[q].launch(xs[c][q].data.ptr, outs[c][q].data.ptr, nbytes, dtype, streams[q])
    sim.flush()
    assert [r.status() for r in ranks] == [0] * world
    for c in range(calls):
        ref.assert_allreduce_outputs(outs[c], inputs[c], dtype, what=f"call {c + 1}: ")
    assert {e[2] for e in sim.launches if e[0].startswith("commprof_oneshot")} == {(blocks,)}
    ev = sim.events
    when = {(kind, rank, phase, epoch): clock for kind, clock, rank, phase, epoch in
            (e for e in ev if e[0] in ("arrive", "pass"))}
    reads = [e for e in ev if e[0] == "read"]
    assert sorted((r, e, q) for _, _, r, e, q, _ in reads) == \
        [(r, e, q) for r in range(world) for e in range(1, calls + 1) for q in range(world)]
    for _, clock, r, e, q, data in reads:
        assert all(when[("arrive", t, 0, e)] <= clock for t in range(world)), (r, e, q)
        assert data == inputs[e - 1][q].tobytes(), f"rank {r}, call {e}: rank {q}'s buffer held another call's input"
        assert all(clock < when[("pass", t, 1, e)] for t in range(world)), (r, e, q)   # nobody left before
    # the scenario did wait: rank 0 arrived at the first entry barrier long before rank 2 let it through
    assert when[("pass", 0, 0, 1)] - when[("arrive", 0, 0, 1)] >= 30
    _assert_flag_area(sim, regions, lay, world, blocks, calls)
    for r in regions:
        r.close()


def test_sim_oneshot_missing_peer_times_out(sim):
    import numpy as np

    region = oneshot.Region(RegionLayout(max_bytes=1 << 16), 0)
    ar = oneshot.OneShotAllReduce(loader.load(), region, 0, 2, [region.ptr, region.ptr], timeout_s=0.2)
    x = sim.asarray(np.zeros(512, np.float32))
    with pytest.raises(UsageError, match="not a multiple of 16 bytes"):
        ar.launch(x.data.ptr, x.data.ptr, 24, "fp32")
    out = sim.zeros(512, np.float32)         # held: the kernel writes it even after its barrier gives up
    ar.launch(x.data.ptr, out.data.ptr, x.nbytes, "fp32")
    sim.flush()
    with pytest.raises(RankHung, match="rank 0 of 2: the entry and exit barrier timed out after 0.2 s"):
        ar.raise_for_status()
    assert oneshot.open_ipc_handle(region.ipc_handle(), 0) == region.ptr
    region.close()


def test_sim_probes(sim):
    from cuda_ext import probes

    same = probes.copy_bandwidth(0, 0, 0, nbytes=1 << 20, iters=3, warmup=1)
    assert same["kind"] == "same-gpu" and same["verified"] and same["gbps"] > 0 and same["iters"] == 3
    read = probes.copy_bandwidth(0, 1, 0, nbytes=(1 << 20) + 3, iters=2, warmup=0)
    assert read["kind"] == "read" and read["verified"] and (0, 1) in sim.peer_enabled
    assert probes.copy_bandwidth(0, 0, 1, nbytes=4096, iters=1, warmup=0)["kind"] == "write"
    ce = probes.copy_engine_bandwidth(0, 1, nbytes=1 << 16, iters=2, warmup=1)
    assert ce["kind"] == "peer" and ce["verified"]
    blocks, threads = probes.copy_grid(1 << 30)
    assert (blocks, threads) == (132 * 4, 512) and probes.copy_grid(100) == (1, 512)
    for a, b, poll in ((0, 0, "local"), (0, 1, "local"), (0, 1, "remote")):
        r = probes.pingpong_latency(a, b, rounds=50, poll=poll)
        assert r["rounds"] == 50 and r["roundtrip_us"] > 0 and r["clock"] == "globaltimer"
    pp = [entry for entry in sim.launches if entry[0] == "commprof_pingpong"]
    assert [(entry[1], entry[2]) for entry in pp] == [(0, (2,)), (1, (1,)), (0, (1,)), (1, (1,)), (0, (1,))]


def test_sim_pingpong_timeout_is_reported(sim, monkeypatch):
    from cuda_ext import probes

    monkeypatch.setattr(sim, "_pingpong", lambda name, blocks, ping, pong, rounds, first, t, result: iter(
        [sim.u64(result + 24, 1)]))
    with pytest.raises(loader.CudaUnavailable, match="timed out after 5 s"):
        probes.pingpong_latency(0, 0, rounds=10)


def _p2p_traffic(sim, since=(0, 0)):
    """What each probe copy moved, from the simulator's logs (copies and device-to-host reads since
    `since`, a (len(copies), len(gets)) mark): {("write", a, b): (writer's bytes, what the owner b
    then read of that buffer through its own GPU)} for copies GPU a wrote into a buffer of another GPU b,
    and {("read", a, k): (bytes at the source, what a then read of its local copy)} for a's k-th read."""
    copies, gets = sim.copies[since[0]:], sim.gets[since[1]:]
    seen, k = {}, {}
    for seq, dev, src, dst, n, data in copies:
        after = next(((d, got) for s_, d, addr, got in gets if s_ > seq and addr == dst), None)
        assert after is not None, f"nobody read back the copy GPU {dev} made into {dst:#x}"
        owner, got = after
        if owner != dev:
            assert ("write", dev, owner) not in seen
            seen[("write", dev, owner)] = (data, got[:n])
        else:
            k[dev] = k.get(dev, -1) + 1
            seen[("read", dev, k[dev])] = (data, got[:n])
    return seen


def _assert_probe_patterns(traffic):
    """The probe's patterns can tell one pair from another: no word pattern is constant, none repeats."""
    import numpy as np

    patterns = [np.frombuffer(sent, np.uint32) for sent, _ in traffic.values()]
    assert all(len(np.unique(p)) > 1 for p in patterns)
    assert len({p.tobytes() for p in patterns}) == len(patterns)


def test_sim_probe_pairs(sim, monkeypatch):
    probes = oneshot.probe_pairs([0, 1], nbytes=4096)
    assert oneshot.p2p_matrix(probes) == [[True, True], [True, True]]
    assert check_eligible(4096, 2, "bf16", probes)[0]
    assert {(0, 1), (1, 0)} <= sim.peer_enabled
    # independently of probe_pairs' own comparison: the pattern GPU a wrote is what the owner GPU b
    # read back through its own memory, and each verdict says so
    traffic = _p2p_traffic(sim)
    assert sorted(key for key in traffic if key[0] == "write") == [("write", 0, 1), ("write", 1, 0)]
    assert sorted(key for key in traffic if key[0] == "read") == [("read", 0, 0), ("read", 1, 0)]
    _assert_probe_patterns(traffic)
    for (kind, a, b), (sent, seen) in traffic.items():
        assert sent == seen and len(sent) == 4096, (kind, a, b)
        if kind == "write":
            assert probes[a][b].write_ok is True
        else:
            assert probes[a][1 - a].read_ok is True
    sim.no_p2p.add((1, 0))
    probes = oneshot.probe_pairs([0, 1], nbytes=4096)
    ok, why = check_eligible(4096, 2, "bf16", probes)
    assert not ok and why == "driver reports no P2P access from GPU 1 to GPU 0"
    # a link that silently loses part of a write: the driver says yes, the probe catches it.
    # Copies run in this order: pair (0, 1) write, read; pair (1, 0) write (corrupted), read.
    sim.no_p2p.clear()
    real, count = sim._copy, [0]

    def lossy(name, blocks, src, dst, nbytes):
        count[0] += 1
        yield from real(name, blocks, src, dst, nbytes)
        if count[0] == 3:
            sim.ct.memset(dst + 64, 0, 16)
    monkeypatch.setattr(sim, "_copy", lossy)
    mark = (len(sim.copies), len(sim.gets))
    probes = oneshot.probe_pairs([0, 1], nbytes=4096)
    assert count[0] == 4
    assert probes[0][1].ok and (probes[1][0].write_ok, probes[1][0].read_ok) == (False, True)
    traffic = _p2p_traffic(sim, mark)       # the owner saw 16 bytes of zeros where the writer's pattern was
    sent, seen = traffic[("write", 1, 0)]
    assert sent != seen and sent[:64] == seen[:64] and seen[64:80] == bytes(16) and sent[80:] == seen[80:]
    assert traffic[("write", 0, 1)][0] == traffic[("write", 0, 1)][1]
    assert check_eligible(4096, 2, "bf16", probes)[1] == \
        "P2P write GPU 1 -> GPU 0 read back wrong data (the driver claims P2P works)"


# ---- sweep --impl custom: the per-rank set-up (microbench/oneshot_rank.py) on the simulated GPU ----

def _ipc_probe_writes(sim, since=0):
    """The set-up's P2P probe writes, from the simulator's copy log: {(writer GPU, owner GPU): (seq, byte
    offset in the owner's region, the writer's bytes)} for each copy into another GPU's region."""
    writes = {}
    for seq, dev, src, dst, n, data in sim.copies[since:]:
        where = sim.owner(dst)
        if where is not None and where[0] != dev:
            assert (dev, where[0]) not in writes, "two probe writes for one pair"
            writes[(dev, where[0])] = (seq, dst - where[1], data)
    return writes


def _owner_saw(sim, owner, seq, offset, data):
    """Did GPU `owner` read `data` back at `offset` of a copy of its region, after copy `seq`?"""
    return any(s_ > seq and d == owner and got[offset:offset + len(data)] == data for s_, d, _, got in sim.gets)


def _assert_ipc_probe_traffic(sim, world):
    """Independently of the set-up's own comparisons: every rank wrote one pattern into every peer's
    region (its own slot, no two alike), read one back from each, and each owner read the writer's
    pattern back through its own GPU."""
    import numpy as np

    writes = _ipc_probe_writes(sim)
    assert sorted(writes) == [(i, j) for i in range(world) for j in range(world) if i != j]
    assert len({off for (i, j), (_, off, _) in writes.items() if j == 0}) == world - 1   # own slots
    patterns = [data for _, _, data in writes.values()]
    assert len(set(patterns)) == len(patterns) and all(len(np.unique(np.frombuffer(p, np.uint32))) > 1
                                                       for p in patterns)
    for (i, j), (seq, off, data) in writes.items():
        assert _owner_saw(sim, j, seq, off, data), f"GPU {j} never saw GPU {i}'s pattern"
    reads = [(dev, sim.owner(src)) for _, dev, src, dst, n, data in sim.copies
             if sim.owner(src) is not None and sim.owner(src)[0] != dev]
    assert sorted((dev, where[0]) for dev, where in reads) == sorted(writes)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_sim_sweep_custom_setup_probes_through_ipc_and_runs(sim, world):
    sim.devices = world
    sim.nulls.update({d: type(sim.nulls[0])(ptr=0, device=d) for d in range(world)})
    ranks, cells = sim_custom_setup(world, world, (16, 4096))
    custom = [c for c in cells if c.custom]
    assert [r.refusal(c) for r in ranks for c in custom] == [""] * (world * len(custom))
    # Every rank wrote its pattern into every peer's buffer through the mapping, and read it back.
    copies = [e for e in sim.launches if e[0] == "commprof_p2p_copy"]
    assert len(copies) == 2 * world * (world - 1)
    _assert_ipc_probe_traffic(sim, world)
    # The probe's patterns were cleared, then the timed call (bind: in place, on torch's current
    # stream wrapped for cupy) runs the real kernel on the mapped buffers.
    import types

    import oneshot_reference as ref

    n = 4096 // 2
    host = [oneshot.rank_pattern(r, n) for r in range(world)]
    inputs = [ref.to_storage(x, "bf16") for x in host]
    cell = next(c for c in custom if c.size_bytes == 4096)
    outs = []
    for r, c in enumerate(ranks):
        g = c.groups[world]
        assert g.op is not None and len(g.peer_bases) == world
        with sim.cuda.Device(r):
            x = sim.asarray(inputs[r].copy())     # in place: the input buffer becomes the output
            stream = sim.cuda.Stream(non_blocking=True)
        c.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
            current_stream=lambda device, s=stream: TorchStream(s.ptr),
            synchronize=lambda device: sim.flush()))
        tensor = types.SimpleNamespace(data_ptr=lambda x=x: x.data.ptr, numel=lambda: n, element_size=lambda: 2)
        c.bind(cell, tensor, None)()
        outs.append(x)
    sim.flush()
    # cupy 14's way in (the CUDA stream protocol), not its deprecated ExternalStream
    assert [call[0] for call in sim.stream_calls] == ["from_external"] * world
    ref.assert_allreduce_outputs(outs, inputs, "bf16")      # independent: bit for bit
    expected = oneshot.reference_sum(host, "bf16")
    assert [verify(o, expected, "bf16", atol=0.0, rtol=0.0) for o in outs] == [0] * world
    for c in ranks:
        c.check_status(cell)
        c.close()
    assert not sim.keep                       # every region freed


def test_sim_sweep_custom_setup_refuses_on_every_rank(sim, monkeypatch):
    sim.devices = 2
    sim.nulls.update({1: type(sim.nulls[0])(ptr=0, device=1)})
    # The driver refuses one direction: nothing is mapped or probed, every rank says why.
    sim.no_p2p.add((1, 0))
    ranks, cells = sim_custom_setup(2, 2)
    cell = next(c for c in cells if c.custom)
    assert [r.refusal(cell) for r in ranks] == ["group 0 (ranks 0-1): driver reports no P2P access from GPU 1 to GPU 0"] * 2
    assert not [e for e in sim.launches if e[0] == "commprof_p2p_copy"]
    # The driver says yes but rank 1's writes into rank 0's buffer lose 16 bytes: the owner's check
    # catches it and both ranks refuse (and fall back to NCCL), though rank 1's read-back was fine.
    sim.no_p2p.clear()
    real, seen = sim._copy, set()

    def lossy(name, blocks, src, dst, nbytes):
        dev = sim.dev_stack[-1]            # the launching GPU; its first copy is its write probe
        write = dev not in seen
        seen.add(dev)

        def run():
            yield from real(name, blocks, src, dst, nbytes)
            if dev == 1 and write:
                sim.ct.memset(dst + 64, 0, 16)
        return run()
    monkeypatch.setattr(sim, "_copy", lossy)
    mark = len(sim.copies)
    ranks, cells = sim_custom_setup(2, 2)
    why = "group 0 (ranks 0-1): P2P write GPU 1 -> GPU 0 read back wrong data (the driver claims P2P works)"
    assert [r.refusal(cell) for r in ranks] == [why, why]
    writes = _ipc_probe_writes(sim, mark)    # independently: the owner saw GPU 0's pattern, not GPU 1's
    assert sorted(writes) == [(0, 1), (1, 0)]
    assert _owner_saw(sim, 1, *writes[(0, 1)]) and not _owner_saw(sim, 0, *writes[(1, 0)])
    seq, off, data = writes[(1, 0)]
    assert _owner_saw(sim, 0, seq, off, data[:64] + bytes(16) + data[80:])
    assert all(r.groups[2].op is None for r in ranks)
    # A size the kernel does not take is refused per cell, with the group itself fine.
    monkeypatch.setattr(sim, "_copy", real)
    ranks, cells = sim_custom_setup(2, 2, (24, 4096))
    by = {c.size_bytes: ranks[0].refusal(c) for c in cells if c.custom}
    assert by[4096] == "" and "not a multiple of 16 bytes" in by[24]


# ---- (c) imports without torch, cupy or numpy -----------------------------------------------------

BLOCKED = """
import sys
for name in ("torch", "cupy", "numpy"):
    sys.modules[name] = None          # any import of these now raises ImportError
import cuda_ext, cuda_ext.loader, cuda_ext.oneshot, cuda_ext.probes
from cuda_ext.oneshot import check_eligible, RegionLayout, PairProbe
print(check_eligible(10240, 2, "bf16", [[True, True], [True, True]])[0])
print(check_eligible(10240, 2, "bf16", [[PairProbe(0, 0, True, True, True), PairProbe(0, 1, False)],
                                        [PairProbe(1, 0, True, True, True)] * 2])[1])
print(RegionLayout().total_bytes)
try:
    cuda_ext.loader.load()
except cuda_ext.loader.CudaUnavailable as e:
    print(e.exit_code, e)
"""


def test_import_without_torch_cupy_numpy():
    res = subprocess.run([sys.executable, "-c", BLOCKED], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "True",
        "driver reports no P2P access from GPU 0 to GPU 1",
        str((8 << 20) + 2 * 8 * 128 + 128),
        "3 cupy not installed, and the CUDA kernels need it: pip install 'commprof[gpu-cuda12]' (cupy-cuda12x) "
        "or 'commprof[gpu-cuda13]' (cupy-cuda13x), the one matching your CUDA major",
    ]


# ---- (d) on a GPU: build, load, run, verify ----------------------------------------------------------

def _load(tmp_path_factory, backend=None):
    hint = loader.gpu_install_hint(loader.torch_cuda_version())
    pytest.importorskip("cupy", reason=f"the GPU tests of cuda_ext need cupy ({hint})")
    with pytest.MonkeyPatch.context() as mp:   # build into a temporary cache, not the user's
        mp.setenv("COMMPROF_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        return loader.load(backend=backend)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return _load(tmp_path_factory)


@pytest.mark.gpu
def test_gpu_load_reports_its_path(kernels):
    assert kernels.backend in ("nvcc", "nvrtc")
    assert re.fullmatch(r"sm_\d+[a-z]?", kernels.arch)
    if kernels.backend == "nvcc":
        assert os.path.isfile(os.path.join(kernels.directory, "build.json"))
    for name in loader.KERNELS:
        kernels.get_function(name)
    assert loader.load() is kernels            # loaded once per process


@pytest.mark.gpu
def test_gpu_same_gpu_copies_verify(kernels):
    import cupy

    from cuda_ext import probes

    sm = probes.copy_bandwidth(0, 0, 0, nbytes=64 << 20, iters=5, warmup=2, kernels=kernels)
    assert sm["kind"] == "same-gpu" and sm["verified"] and sm["gbps"] > 0 and sm["rw_gbps"] == 2 * sm["gbps"]
    ce = probes.copy_engine_bandwidth(0, 0, nbytes=64 << 20, iters=5, warmup=2)
    assert ce["verified"] and ce["gbps"] > 0
    # unaligned pointers and an odd size take the byte path
    with cupy.cuda.Device(0):
        src = cupy.arange(100003, dtype=cupy.uint32).view(cupy.uint8)
        dst = cupy.zeros_like(src)
        probes.launch_copy(kernels, src.data.ptr + 3, dst.data.ptr + 5, 4097)
        cupy.cuda.Device(0).synchronize()
        assert bool(cupy.array_equal(dst[5:5 + 4097], src[3:3 + 4097]))
        assert int(dst[:5].sum()) == 0 and int(dst[5 + 4097:].sum()) == 0


@pytest.mark.gpu
def test_gpu_same_gpu_pingpong(kernels):
    from cuda_ext import probes

    r = probes.pingpong_latency(0, 0, rounds=2000, kernels=kernels)
    assert r["clock"] == "globaltimer" and r["rounds"] == 2000
    assert 0 < r["roundtrip_us"] < 1000 and r["oneway_us"] == r["roundtrip_us"] / 2


@pytest.mark.gpu
def test_gpu_probe_pairs(kernels):
    import cupy

    n = cupy.cuda.runtime.getDeviceCount()
    probes = oneshot.probe_pairs(list(range(min(n, 2))), nbytes=1 << 16, kernels=kernels)
    assert len(probes) == min(n, 2)
    assert probes[0][0].ok
    if n >= 2:   # whatever the box says, the decision is consistent with the probe
        assert check_eligible(4096, 2, "bf16", probes)[0] == (probes[0][1].ok and probes[1][0].ok)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_gpu_oneshot_allreduce_verifies(kernels, dtype, world):
    import cupy

    import oneshot_reference as ref

    # 16 bytes (one vector), a decode-size message, and 4 MiB (more vectors than threads: the grid loops)
    for nbytes in (16, 10240, 4 << 20):
        n = nbytes // oneshot.DTYPES[dtype]
        host = [oneshot.rank_pattern(r, n) for r in range(world)]
        stored = [ref.to_storage(x, dtype) for x in host]
        inputs = [cupy.asarray(x) for x in stored]
        outs = oneshot.emulate_on_one_gpu(inputs, dtype, kernels=kernels, calls=3)
        ref.assert_allreduce_outputs(outs, stored, dtype, what=f"{nbytes} bytes: ")   # independent, bit for bit
        expected = oneshot.reference_sum(host, dtype)
        for rank, out in enumerate(outs):
            assert verify(out, expected, dtype) == 0, (dtype, world, nbytes, rank)
            assert verify(out, expected, dtype, atol=0.0, rtol=0.0) == 0   # small integers: exact


@pytest.mark.gpu
def test_gpu_oneshot_refuses_and_times_out(kernels):
    import cupy

    region = oneshot.Region(RegionLayout(max_bytes=1 << 16), 0)
    try:
        # rank 0 of a 2-rank group whose peer never comes: the entry barrier gives up
        ar = oneshot.OneShotAllReduce(kernels, region, 0, 2, [region.ptr, region.ptr], timeout_s=0.2)
        x = cupy.zeros(512, dtype=cupy.float32)
        with pytest.raises(UsageError, match="not a multiple of 16 bytes"):
            ar.launch(x.data.ptr, x.data.ptr, 24, "fp32")
        with pytest.raises(UsageError, match="exceeds the one-shot limit of 64 KiB"):
            ar.launch(x.data.ptr, x.data.ptr, 1 << 17, "fp32")
        out = cupy.empty_like(x)
        ar.launch(x.data.ptr, out.data.ptr, x.nbytes, "fp32")
        cupy.cuda.Device(0).synchronize()
        with pytest.raises(RankHung, match="barrier timed out after 0.2 s"):
            ar.raise_for_status()
    finally:
        cupy.cuda.Device(0).synchronize()
        region.close()


@pytest.mark.gpu
def test_gpu_nvrtc_path_runs_too(tmp_path_factory):
    import cupy

    from cuda_ext import probes

    k = _load(tmp_path_factory, backend="nvrtc")
    assert k.backend == "nvrtc"
    assert probes.pingpong_latency(0, 0, rounds=100, kernels=k)["roundtrip_us"] > 0
    import oneshot_reference as ref

    host = [oneshot.rank_pattern(r, 4096) for r in range(2)]
    stored = [ref.to_storage(x, "bf16") for x in host]
    outs = oneshot.emulate_on_one_gpu([cupy.asarray(x) for x in stored], "bf16", kernels=k)
    ref.assert_allreduce_outputs(outs, stored, "bf16")
    assert all(verify(o, oneshot.reference_sum(host, "bf16"), "bf16") == 0 for o in outs)


def test_p2p_cli_without_gpu_is_one_line(tmp_path):
    import subprocess
    import sys as _sys

    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is visible: the no-GPU path cannot be shown here")
    except ImportError:
        pass
    res = subprocess.run([_sys.executable, "-m", "commprof", "p2p", "--out", str(tmp_path / "p")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 3
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commprof: error:") and "Traceback" not in res.stderr
    assert not (tmp_path / "p").exists()
