"""What connects the GPUs of this box, as NVML reports it (``commprof topo`` prints it; a sweep or
trace saves it beside its results whenever NVML answers).

Per GPU: name, memory, PCI bus id, PCIe link (current, max, and the GPU's own max), NUMA node, CPU
affinity, BAR1 size, NVLink links and version, PCIe replay and NVLink error counters. Per pair: the
``nvidia-smi topo -m`` class (``NV#``, ``PIX`` ... ``SYS``) and the P2P status of read, write,
NVLink and atomics. Over the box: one ``interconnect_class`` and the number of NUMA nodes the GPUs
sit on.

NVML traps handled here (NVML API reference, docs.nvidia.com/deploy/nvml-api):

* An answer NVML cannot give for a GPU (Not Supported, or any other NVML error on a per-field
  call) is the string ``"n/a"``, never a crash. Only a missing binding, a missing driver or zero
  GPUs is an error (:class:`~commprof.model.errors.NoGpuError`, exit code 7).
* ``nvmlDeviceGetTopologyCommonAncestor`` describes the PCIe path only: ``NV#`` is counted from
  each active link's remote PCI bus id.
* P2P capability indexes are passed as plain integers: nvidia-ml-py 13 defines
  ``NVML_P2P_CAPS_INDEX_READ`` as the tuple ``(0,)``.
* ``nvmlDeviceGetNvLinkVersion`` returns an enum, not a generation (A100 answers 5 = NVLink 3.1).
* ``nvmlDeviceGetFieldValues`` succeeds if any entry succeeded: each entry's ``nvmlReturn`` is read.
* The current PCIe generation and width drop at idle, so ``pcie_at_max`` compares max values only.

Only the standard library is imported at module level: pynvml is imported inside
:func:`collect_topology`, so ``import commprof.capture.nvmltopo`` works on a machine without it. The box's
``interconnect_class`` is :func:`commprof.analysis.interconnect.classify_pairs`' (one rule for NVML and for
imported ``nvidia-smi topo`` text).
"""
from __future__ import annotations


import os
import socket
from collections import Counter

from commprof._version import __version__
from commprof.model.errors import NoGpuError, where
from commprof.analysis.interconnect import classify_pairs
from commprof.results.topo import GPU_KEYS, NA, TOPO_JSON, write_topology
from commprof.model.machine import cpu_ranges, now_iso

# NVML numbers from nvml.h (API 13). Plain integers on purpose: the binding's own constants are not
# all usable (NVML_P2P_CAPS_INDEX_READ is a tuple in nvidia-ml-py 13).
P2P_INDEX = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
P2P_STATUS = {0: "OK", 1: "chipset not supported", 2: "GPU not supported", 3: "topology not supported",
              4: "disabled by driver", 5: "not supported", 6: "unknown"}
# The codes `nvidia-smi topo -p2p` prints for the same statuses ("disabled by driver" is its "DR",
# disabled by a driver registry key).
# nvmlDeviceGetTopologyCommonAncestor levels -> nvidia-smi topo -m legend. INTERNAL (0) means both
# GPUs sit on one board (a dual-GPU card): at most the board's own bridge, so PIX.
TOPO_LEVEL = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlNvlinkVersion_t -> NVLink version (enum value 5 is NVLink 3.1, what an A100 answers).
NVLINK_VERSION = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
NVLINK_REMOTE_SWITCH = 2          # nvmlIntNvLinkDeviceType_t: GPU 0, IBMNPU 1, SWITCH 2
FEATURE_ENABLED = 1               # nvmlDeviceGetNvLinkState answer for an active link
AFFINITY_SCOPE_NODE = 0
MAX_LINKS_PROBE = 36              # NVML_NVLINK_MAX_LINKS in API 13; only used when the link count is unknown
FI_NVLINK_LINK_COUNT = 91
# Device-wide NVLink error totals (field ids), summed into nvlink_error_count.
NVLINK_ERROR_FIELDS = {"crc_flit": 38, "crc_data": 45, "replay": 52, "recovery": 59}
# nvmlValueType_t -> member of the c_nvmlValue_t union that holds the value.
VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
NUMA_MASK_WORDS = 4               # 64-bit words of NUMA-node mask asked for: 256 nodes




def _import_pynvml():
    try:
        import pynvml
    except ImportError as e:
        raise NoGpuError(f"{where(stage='topo')}: no NVML bindings: cannot import pynvml ({e}); "
                         "install nvidia-ml-py (pip install nvidia-ml-py)") from None
    return pynvml


def _init_message(e) -> str:
    code = getattr(e, "value", None)
    if code == 18:      # NVML_ERROR_LIB_RM_VERSION_MISMATCH
        return (f"{where(stage='topo')}: NVIDIA driver and library do not match: nvmlInit failed ({e}); "
                "reboot (or reload the nvidia kernel modules) after a driver update")
    if code == 9:       # NVML_ERROR_DRIVER_NOT_LOADED
        return (f"{where(stage='topo')}: NVIDIA driver not loaded: nvmlInit failed ({e}); "
                "load it (sudo modprobe nvidia), install the NVIDIA driver, or run on a GPU machine")
    return (f"{where(stage='topo')}: no NVIDIA driver: nvmlInit failed ({e}); "
            "install the NVIDIA driver or run on a GPU machine")


def _bindings_version(nvml) -> str:
    v = getattr(nvml, "__version__", None)
    if v:
        return str(v)
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:  # noqa: BLE001 - metadata missing (vendored copy): the version is just unknown
        return "(version unknown)"


def _ask(nvml, call: str, *args):
    """One NVML answer, or NA when this GPU, driver or binding cannot give it."""
    fn = getattr(nvml, call, None)
    if fn is None:      # an older nvidia-ml-py without this call
        return NA
    try:
        return fn(*args)
    except nvml.NVMLError:
        return NA


def _text(v):
    if v is NA:
        return NA
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _int(v):
    return NA if v is NA else int(v)


def _attr_int(obj, name):
    return NA if obj is NA else int(getattr(obj, name))


def _bits(words) -> list[int]:
    """Positions of the set bits of a mask given as 64-bit words, lowest word first."""
    out = []
    for w, word in enumerate(words):
        word = int(word)
        out.extend(w * 64 + b for b in range(64) if word >> b & 1)
    return out


def _cpu_list(words) -> str:
    """[0xffffffff, 0xffffffff] -> "0-31,64-95" (the form nvidia-smi and taskset use)."""
    if words is NA:
        return NA
    cpus = _bits(words)
    return cpu_ranges(cpus) if cpus else NA


def _bus_key(bus_id: str):
    """Comparable PCI address: "00000000:18:00.0" and "0000:18:00.0" give the same key."""
    s = bus_id.strip().lower()
    try:
        dom, bus, rest = s.split(":")
        dev, fn = rest.split(".")
        return int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16)
    except ValueError:
        return s


def _field_values(nvml, h, field_ids: list[int]) -> dict:
    """Field id -> value or NA. The call succeeds when any entry did, so every entry is checked."""
    out = {f: NA for f in field_ids}
    entries = _ask(nvml, "nvmlDeviceGetFieldValues", h, list(field_ids))
    if entries is NA:
        return out
    for fid, e in zip(field_ids, entries):
        member = VALUE_MEMBER.get(int(e.valueType))
        if int(e.nvmlReturn) == 0 and member is not None:
            out[fid] = getattr(e.value, member)
    return out


def _nvlink_links(nvml, h, link_count):
    """(link, remote device type, remote bus key) per active link; NA when no link answers."""
    fn = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    if fn is None or link_count == 0:
        return NA if fn is None else []
    probing = not isinstance(link_count, int)
    active, answered = [], 0
    for link in range(MAX_LINKS_PROBE if probing else link_count):
        try:
            state = fn(h, link)
        except nvml.NVMLError:
            if probing:     # past the last link (Invalid Argument), or no NVLink at all (Not Supported)
                break
            continue
        answered += 1
        if state != FEATURE_ENABLED:
            continue
        rtype = _ask(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
        rpci = _ask(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
        active.append((link, rtype, NA if rpci is NA else _bus_key(_text(rpci.busId))))
    return active if answered else NA


def _pcie_verdict(g: dict):
    """(pcie_at_max, note). Judged on max values: the current link trains down at idle."""
    gen_max, gen_gpu, width_max = g["pcie_link_gen_max"], g["pcie_link_gen_gpu_max"], g["pcie_link_width_max"]
    gen_now, width_now = g["pcie_link_gen_current"], g["pcie_link_width_current"]
    if NA in (gen_max, gen_gpu):
        at_max = NA
        note = "not judged: NVML gives no max link generation for the slot or for the GPU"
    elif gen_max >= gen_gpu:
        at_max = True
        note = f"max link Gen{gen_max} is the GPU's own max"
    else:
        at_max = False
        note = (f"max link Gen{gen_max} is below the GPU's own Gen{gen_gpu}: "
                "the slot, a riser or a BIOS setting holds the link down")
    if width_max is not NA and width_max < 16:
        note += (f"; max width x{width_max} is below x16 (NVML has no GPU-own max width, "
                 "so whether the slot or the GPU limits it is not known)")
    if NA not in (gen_now, gen_max, width_now, width_max) and (gen_now < gen_max or width_now < width_max):
        note += (f"; now Gen{gen_now} x{width_now}, below max: normal at idle (the link trains down "
                 "in low-power states), so only max values are judged")
    return at_max, note


def _numa_nodes_of(nvml, h) -> list[int]:
    words = _ask(nvml, "nvmlDeviceGetMemoryAffinity", h, NUMA_MASK_WORDS, AFFINITY_SCOPE_NODE)
    return [] if words is NA else _bits(words)


def _collect_gpu(nvml, index: int, h, cpu_words: int):
    """One GPU's dict, its active NVLinks (internal) and its NUMA nodes (internal)."""
    g = {"index": index}
    if h is NA:         # no handle (e.g. the GPU fell off the bus): every answer is n/a
        g.update({k: NA for k in GPU_KEYS})
        return g, NA, []
    g["name"] = _text(_ask(nvml, "nvmlDeviceGetName", h))
    pci = _ask(nvml, "nvmlDeviceGetPciInfo", h)
    g["pci_bus_id"] = NA if pci is NA else _text(pci.busId)
    g["memory_total_bytes"] = _attr_int(_ask(nvml, "nvmlDeviceGetMemoryInfo", h), "total")
    g["bar1_total_bytes"] = _attr_int(_ask(nvml, "nvmlDeviceGetBAR1MemoryInfo", h), "bar1Total")
    g["pcie_link_gen_current"] = _int(_ask(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", h))
    g["pcie_link_width_current"] = _int(_ask(nvml, "nvmlDeviceGetCurrPcieLinkWidth", h))
    g["pcie_link_gen_max"] = _int(_ask(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", h))
    g["pcie_link_width_max"] = _int(_ask(nvml, "nvmlDeviceGetMaxPcieLinkWidth", h))
    g["pcie_link_gen_gpu_max"] = _int(_ask(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", h))
    g["pcie_at_max"], g["pcie_note"] = _pcie_verdict(g)
    nodes = _numa_nodes_of(nvml, h)
    g["numa_node"] = NA if not nodes else nodes[0] if len(nodes) == 1 else ",".join(map(str, nodes))
    g["cpu_affinity"] = _cpu_list(_ask(nvml, "nvmlDeviceGetCpuAffinity", h, cpu_words))

    fields = _field_values(nvml, h, [FI_NVLINK_LINK_COUNT, *NVLINK_ERROR_FIELDS.values()])
    link_count = _int(fields[FI_NVLINK_LINK_COUNT])
    links = _nvlink_links(nvml, h, link_count)
    g["nvlink_active_links"] = NA if links is NA else len(links)
    version = _ask(nvml, "nvmlDeviceGetNvLinkVersion", h, links[0][0]) if links is not NA and links else NA
    g["nvlink_version"] = NA if version is NA else NVLINK_VERSION.get(int(version), f"unknown enum {int(version)}")
    g["pcie_replay_count"] = _int(_ask(nvml, "nvmlDeviceGetPcieReplayCounter", h))
    if links is NA or link_count == 0:      # no NVLink on this GPU: its NVLink counters mean nothing
        counters = {name: NA for name in NVLINK_ERROR_FIELDS}
    else:
        counters = {name: _int(fields[fid]) for name, fid in NVLINK_ERROR_FIELDS.items()}
    answered = [v for v in counters.values() if v is not NA]
    g["nvlink_error_count"] = sum(answered) if answered else NA
    g["nvlink_error_counters"] = counters
    known = isinstance(link_count, int) and links is not NA
    g["nvlink_inactive_links"] = link_count - len(links) if known else NA
    return g, links, nodes


def _nv_count(links_i, links_j, bus_i, bus_j) -> int:
    """NVLinks between two GPUs: direct links to the peer, plus links to each shared NVSwitch."""
    li = [] if links_i is NA else links_i
    lj = [] if links_j is NA else links_j
    direct = max(sum(1 for _, _, r in li if bus_j is not NA and r == bus_j),
                 sum(1 for _, _, r in lj if bus_i is not NA and r == bus_i))
    sw_i = Counter(r for _, t, r in li if t == NVLINK_REMOTE_SWITCH)
    sw_j = Counter(r for _, t, r in lj if t == NVLINK_REMOTE_SWITCH)
    return direct + sum(min(c, sw_j[s]) for s, c in sw_i.items() if s in sw_j)


def _notes(gpus, matrix, p2p, cls) -> list[str]:
    n = len(gpus)
    notes = []
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    dead = [f"GPU{i}-GPU{j}" for i, j in pairs if matrix[i][j].startswith("NV")
            and (p2p["nvlink"][i][j] != "OK" or p2p["read"][i][j] != "OK")]
    if dead:
        notes.append(f"NVLink present but P2P not OK for {', '.join(dead[:4])}{' ...' if len(dead) > 4 else ''}: "
                     "peer traffic may silently fall back to PCIe or host memory")
    off = sorted({p2p[op][i][j] for i, j in pairs for op in ("read", "write")
                  if not matrix[i][j].startswith("NV") and p2p[op][i][j] not in ("OK", NA)})
    if off:
        notes.append(f"P2P read/write is off between some GPUs ({', '.join(off)}): NCCL then moves "
                     "data through host shared memory (SHM)")
    if cls not in ("nvswitch", "nvlink") and any(matrix[i][j] == "SYS" for i, j in pairs):
        notes.append("some pairs are SYS (across NUMA nodes): a TP group spanning them crosses the CPU "
                     "interconnect; keep TP groups inside one socket where the degree allows")
    inactive = [f"GPU{g['index']} ({g['nvlink_inactive_links']})" for g in gpus
                if isinstance(g["nvlink_inactive_links"], int) and g["nvlink_inactive_links"] > 0]
    if inactive:
        notes.append(f"inactive NVLinks: {', '.join(inactive)}")
    low = [f"GPU{g['index']}" for g in gpus if g["pcie_at_max"] is False]
    if low:
        notes.append(f"PCIe link below the GPU's own max generation: {', '.join(low)}")
    return notes


def collect_topology(nvml=None) -> dict:
    """Ask NVML what connects this box's GPUs.

    Args:
        nvml: the module answering NVML calls; the real ``pynvml`` (nvidia-ml-py) by default,
            imported here. Tests pass a fake that answers from recorded fixtures.

    Returns:
        A JSON-serialisable dict: ``kind``, ``source``, ``commprof_version``, ``driver_version``,
        ``host``, ``collected_at``, ``gpu_count``, ``gpus`` (one dict per GPU; sizes in bytes, key
        names carry units), ``matrix`` (``nvidia-smi topo -m`` cells), ``p2p`` (``read``/``write``/
        ``nvlink``/``atomics`` -> matrix of statuses, row = from, column = to),
        ``interconnect_class``, ``numa_nodes`` and ``notes``. Anything NVML cannot tell is "n/a".

    Raises:
        NoGpuError: no nvidia-ml-py, no driver (nvmlInit fails) or no GPU (exit code 7).
    """
    nvml = nvml if nvml is not None else _import_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        raise NoGpuError(_init_message(e)) from None
    try:
        return _collect(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _collect(nvml) -> dict:
    driver = _text(_ask(nvml, "nvmlSystemGetDriverVersion"))
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as e:
        raise NoGpuError(f"{where(stage='topo')}: NVML (driver {driver}) cannot count GPUs ({e}); "
                         "check the driver with nvidia-smi") from None
    if count == 0:
        raise NoGpuError(f"{where(stage='topo')}: no NVIDIA GPU: NVML (driver {driver}) reports 0 devices; "
                         "check that the GPUs are visible here (nvidia-smi -L; in a container, --gpus all)")
    cpu_words = max(16, -(-(os.cpu_count() or 1) // 64))
    handles = [_ask(nvml, "nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    gpus, links, nodes = [], [], []
    for i, h in enumerate(handles):
        g, lk, nd = _collect_gpu(nvml, i, h, cpu_words)
        gpus.append(g)
        links.append(lk)
        nodes.append(nd)
    bus = [NA if g["pci_bus_id"] is NA else _bus_key(g["pci_bus_id"]) for g in gpus]

    matrix = [["X" if i == j else NA for j in range(count)] for i in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            nv = _nv_count(links[i], links[j], bus[i], bus[j])
            if nv:
                cell = f"NV{nv}"
            elif NA in (handles[i], handles[j]):
                cell = NA
            else:
                level = _ask(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                cell = NA if level is NA else TOPO_LEVEL.get(int(level), NA)
            matrix[i][j] = matrix[j][i] = cell

    p2p = {}
    for op, idx in P2P_INDEX.items():
        m = [["X" if i == j else NA for j in range(count)] for i in range(count)]
        for i in range(count):
            for j in range(count):
                if i != j and NA not in (handles[i], handles[j]):
                    st = _ask(nvml, "nvmlDeviceGetP2PStatus", handles[i], handles[j], idx)
                    m[i][j] = NA if st is NA else P2P_STATUS.get(int(st), f"status {int(st)}")
        p2p[op] = m

    switched = any(t == NVLINK_REMOTE_SWITCH for lk in links if lk is not NA for _, t, _ in lk)
    cls = classify_pairs(matrix, p2p, switched)
    all_nodes = {n for nd in nodes for n in nd}
    return {
        "kind": "measured",
        "source": f"NVML via nvidia-ml-py {_bindings_version(nvml)}",
        "commprof_version": __version__,
        "driver_version": driver,
        "host": socket.gethostname(),
        "collected_at": now_iso(),
        "gpu_count": count,
        "gpus": gpus,
        "matrix": matrix,
        "p2p": p2p,
        "interconnect_class": cls,
        "numa_nodes": len(all_nodes) if all_nodes else NA,
        "notes": _notes(gpus, matrix, p2p, cls),
    }


def try_collect_topology(nvml=None) -> dict | None:
    """:func:`collect_topology`, or None when it fails for any reason (a sweep or trace saves
    ``topo.json`` whenever NVML answers and carries on without it otherwise)."""
    try:
        return collect_topology(nvml)
    except Exception:  # noqa: BLE001 - the topology is a side record; it never stops a measurement
        return None


def save_topology(path: str) -> bool:
    """Write ``topo.json`` into a results dir whenever NVML answers (no GPU: nothing, silently)."""
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, TOPO_JSON)):
        return False
    topo = try_collect_topology()
    if topo is None:
        return False
    write_topology(topo, os.path.join(path, TOPO_JSON))
    return True
