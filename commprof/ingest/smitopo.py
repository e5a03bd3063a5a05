"""``commprof import nvidia-smi-topo FILE...``: the text a vendor sends (``nvidia-smi topo -m``, and
``nvidia-smi topo -p2p r`` when given) as the same ``topo.json`` that ``commprof topo`` writes.

``topo -m`` gives the pairwise matrix (``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``;
``SOC`` is older drivers' name for ``SYS``), each GPU's CPU and NUMA affinity, and NIC rows and
columns (skipped). ``topo -p2p r`` (or ``w``, ``n``, ``a``) gives one P2P status matrix (``OK``,
``CNS``, ``GNS``, ``TNS``, ``NS``, ``DR``, ``U``); which one is read from a ``-p2p X`` command line
in the text or the file name (``p2p_w``), else it counts as ``read`` (the one a buyer is asked for).
Several blocks may sit in one file or in several. What the text does not say (GPU names, PCIe
link generation, NVLink version and error counters) is "n/a" in ``topo.json``: the GPU names come
from the box's nccl-tests logs or sweep, and ``check`` names which evidence decided.

Only the standard library at module level.
"""
from __future__ import annotations

import os
import re

from commprof import results
from commprof._version import __version__
from commprof.model.errors import UsageError, shown
from commprof.model.fileio import all_or_none, shown_path
from commprof.model.fileio import read_user_bytes
from commprof.model.machine import now_iso
from commprof.analysis.interconnect import classify_pairs
from commprof.results.topo import NA, TOPO_JSON, GPU_KEYS, write_topology

# NV# counts bonded NVLinks: 1 up to the 18 a GPU has (NV0 or NV99 is no link count)
LINK_CELL = re.compile(r"^(X|NV(?:[1-9]|1[0-8])|PIX|PXB|PHB|NODE|SYS|SOC|PSB)$", re.ASCII)
P2P_CODES = {"OK": "OK", "CNS": "chipset not supported", "GNS": "GPU not supported",
             "TNS": "topology not supported", "NS": "not supported", "DR": "disabled by driver",
             "U": "unknown"}
P2P_MODES = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "pci"}
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|mlx5_\d+|CPU)$", re.ASCII)
# Linux numbers NUMA nodes below MAX_NUMNODES, at most 2^10 (CONFIG_NODES_SHIFT <= 10)
MAX_NUMA_NODE = 1023
_MODE = re.compile(r"-p2p\s*([rwnap])\b|p2p[_-]?([rwnap])(?:\b|_|\.)", re.IGNORECASE)
# ``nvidia-smi topo -mp`` (``--matrix_pci``) prints the PCIe paths only: an NVLink pair shows its PCIe path
# there (DeepEP#202: 8x H20 as NODE/SYS), so such a matrix cannot tell the fabric
_PCI_ONLY = re.compile(r"topo\s+(?:-mp|--matrix_pci)\b|topo[_-]mp\b", re.IGNORECASE)
# the NIC legend of newer drivers: "  NIC0: mlx5_0"
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", re.ASCII)
# a NUMA affinity: one node, or a list/range of them when a GPU is near several ("0-1", sglang#7888)
_NODE_LIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.ASCII)
# a GPU-NIC path at most through PCIe switches (no host bridge): where GPUDirect RDMA runs at full rate
NEAR_NIC = ("PIX", "PXB")
#: The largest file read: ``topo -m`` of 8 GPUs and 8 NICs is ~2 KB and of 72 GPUs ~40 KB, so a
#: file over 4 MiB is no nvidia-smi topo output (a 700 MB one took 72 s and 3.1 GB before this cap).
MAX_TOPO_BYTES = 4 << 20
# Links per GPU in any NVLink generation so far (H100/B200: 18). NV# on every pair with k x (n-1)
# above that cannot be direct links: the pairs meet in an NVSwitch.
MAX_LINKS_PER_GPU = 18


def _read_text(path: str) -> str:
    label = shown(path, 200)
    data = read_user_bytes(path, label, " is a directory; pass the file holding nvidia-smi topo's output",
                           limit=MAX_TOPO_BYTES)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise UsageError(f"{label}: starts as UTF-16 text but is not") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{label}: byte {e.start} is not UTF-8; pass nvidia-smi topo's text output") from None


def _blocks(path: str, text: str) -> list[dict]:
    """Every matrix in one file: {kind: "topo"|"p2p", mode, gpus, cells, cpu, numa, line}."""
    label = os.path.basename(path)
    lines = text.splitlines()
    out = []
    i = 0
    file_mode = None
    m = _MODE.search(os.path.basename(path))
    if m:
        file_mode = P2P_MODES[(m.group(1) or m.group(2)).lower()]
    last_mode = None
    file_pci_only = bool(_PCI_ONLY.search(os.path.basename(path)))
    pci_only = None
    while i < len(lines):
        raw = lines[i]
        m = _MODE.search(raw) if "p2p" in raw.lower() else None
        if m and not raw.strip().startswith(("GPU", "NIC")):
            last_mode = P2P_MODES[(m.group(1) or m.group(2)).lower()]
        if "topo" in raw.lower() and not raw.strip().startswith(("GPU", "NIC")):
            pci_only = bool(_PCI_ONLY.search(raw))
        toks = raw.replace("|", " ").split()
        if toks and toks[0] == "GPU0" and (len(toks) == 1 or _DEVICE.match(toks[1]) or toks[1] == "CPU"):
            # a header: the device columns, then CPU Affinity / NUMA Affinity / GPU NUMA ID
            cols = []
            for t in toks:
                if _DEVICE.match(t) and t != "CPU":
                    cols.append(t)
                else:
                    break
            gpu_cols = [c for c in cols if c.startswith("GPU")]
            header_line = i + 1
            rows, cpu, numa, nic_cells = {}, {}, {}, {}
            kind = None
            i += 1
            while i < len(lines):
                r = lines[i].replace("|", " ").split()
                if not r:
                    i += 1
                    if rows:
                        break
                    continue
                if not _DEVICE.match(r[0]) or r[0] == "CPU":
                    break
                name = r[0]
                cells = r[1:1 + len(cols)]
                if len(cells) < len(cols) and not name.startswith("GPU"):
                    i += 1              # a NIC row cut short in a paste: NIC rows are not read (GPU rows hold the paths)
                    continue
                if len(cells) < len(cols):
                    raise UsageError(f"'{label}' line {i + 1}: row {name} has {len(cells)} cells for the "
                                     f"{len(cols)} columns of the header on line {header_line}")
                if name.startswith("GPU"):
                    for c in cells:
                        c_kind = "topo" if LINK_CELL.match(c) else "p2p" if c in P2P_CODES else None
                        if c == "X":
                            continue
                        if c_kind is None:
                            raise UsageError(f"'{label}' line {i + 1}: cell {shown(c, 20)} of row {name} is "
                                             "neither a topo -m class (NV#, PIX, PXB, PHB, NODE, SYS) nor a "
                                             "-p2p status (OK, CNS, GNS, TNS, NS, DR, U)")
                        if kind and c_kind != kind:
                            raise UsageError(f"'{label}' line {i + 1}: row {name} mixes topo -m classes and "
                                             "-p2p statuses")
                        kind = c_kind
                    rows[name] = [cells[cols.index(g)] for g in gpu_cols]
                    nic_cells[name] = {c: cells[k] for k, c in enumerate(cols) if not c.startswith("GPU")}
                    rest = r[1 + len(cols):]
                    if rest:
                        cpu[name] = rest[0]
                    if len(rest) > 1:
                        numa[name] = rest[1]
                i += 1
            if not rows:
                continue
            missing = [g for g in gpu_cols if g not in rows]
            if missing:
                raise UsageError(f"'{label}' line {header_line}: no row for {', '.join(missing)} under this header")
            n = len(gpu_cols)
            if gpu_cols != [f"GPU{k}" for k in range(n)]:
                raise UsageError(f"'{label}' line {header_line}: GPU columns must be GPU0..GPU{n - 1} in order")
            cells = [rows[g] for g in gpu_cols]
            for a in range(n):
                if cells[a][a] != "X":
                    raise UsageError(f"'{label}' line {header_line + a + 1}: GPU{a}'s own cell is "
                                     f"{shown(cells[a][a], 20)}, expected X")
            out.append({"kind": kind or "topo", "mode": last_mode or file_mode or "read",
                        "mode_assumed": not (last_mode or file_mode), "gpus": n,
                        "cells": cells, "cpu": [cpu.get(g, NA) for g in gpu_cols],
                        "numa": [numa.get(g, NA) for g in gpu_cols], "line": header_line, "file": path,
                        "nics": [c for c in cols if not c.startswith("GPU")],
                        "nic_cells": [nic_cells[g] for g in gpu_cols],
                        "pci_only": file_pci_only if pci_only is None else pci_only})
            last_mode = None
            pci_only = None
            continue
        i += 1
    legend = {m.group(1): m.group(2) for m in map(_NIC_LEGEND.match, lines) if m}
    for b in out:
        b["nic_legend"] = legend
    return out


def _numa_nodes(text: str) -> set[int]:
    """The nodes of a NUMA affinity ("3", "0-1", "0,2") as a set; empty when a node is past
    :data:`MAX_NUMA_NODE` or a range runs backwards (no such affinity)."""
    nodes = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b or a)
        if hi > MAX_NUMA_NODE or lo > hi:
            return set()
        nodes.update(range(lo, hi + 1))
    return nodes


def _nic_list(t: dict) -> list[dict]:
    """The NICs of a ``topo -m`` matrix: name, device (from the NIC legend, or the column itself on
    older drivers: ``mlx5_0``), the path to each GPU and the GPUs at most a PCIe switch away."""
    nics = []
    for k, name in enumerate(t["nics"]):
        paths = {f"GPU{g}": t["nic_cells"][g][name] for g in range(t["gpus"])}
        device = t["nic_legend"].get(name, name if not name.startswith("NIC") else NA)
        nics.append({"index": k, "name": name, "device": device, "gpu_paths": paths,
                     "near_gpus": [g for g in range(t["gpus"]) if paths[f"GPU{g}"] in NEAR_NIC]})
    return nics


def parse_smi_topo(paths: list[str]) -> dict:
    """``topo.json`` (the dict :func:`commprof.capture.nvmltopo.collect_topology` returns) from the text of
    ``nvidia-smi topo -m`` and optionally ``nvidia-smi topo -p2p r|w|n|a``, in one or more files.

    Raises:
        UsageError: one line naming the file (and line) on anything that is not such output, a
            GPU count that differs between the matrices, or no ``topo -m`` matrix at all.
    """
    if not paths:
        raise UsageError("import nvidia-smi-topo: no input files given")
    blocks = []
    for p in paths:
        found = _blocks(p, _read_text(p))
        if not found:
            raise UsageError(f"'{os.path.basename(p)}': no nvidia-smi topo matrix (expected a header line "
                             "'GPU0 GPU1 ...' and one row per GPU)")
        blocks.extend(found)
    topo_blocks = [b for b in blocks if b["kind"] == "topo"]
    if not topo_blocks:
        raise UsageError(f"'{os.path.basename(paths[0])}': only -p2p matrices; also pass 'nvidia-smi topo -m' "
                         "output (the link matrix)")
    # a -m matrix (NVLinks shown) decides over a -mp one (PCIe paths only) given beside it
    full = [b for b in topo_blocks if not b["pci_only"]]
    t = (full or topo_blocks)[-1]
    pci_only = t["pci_only"]
    n = t["gpus"]
    for b in blocks:
        if b["gpus"] != n:
            raise UsageError(f"'{os.path.basename(b['file'])}' line {b['line']}: {b['gpus']} GPUs, but the "
                             f"topo -m matrix has {n}: pass outputs of one box")
    matrix = [["X" if i == j else ("SYS" if c == "SOC" else c) for j, c in enumerate(row)]
              for i, row in enumerate(t["cells"])]
    for i in range(n):
        for j in range(i + 1, n):
            if matrix[i][j] != matrix[j][i]:
                raise UsageError(f"'{os.path.basename(t['file'])}' line {t['line'] + i + 1}: GPU{i}-GPU{j} is "
                                 f"{matrix[i][j]} but GPU{j}-GPU{i} is {matrix[j][i]}: not a topo -m matrix")
    p2p = {}
    for b in blocks:
        if b["kind"] == "p2p":
            for i, row in enumerate(b["cells"]):
                for j, c in enumerate(row):
                    if i != j and c not in P2P_CODES:
                        raise UsageError(f"'{os.path.basename(b['file'])}' line {b['line'] + i + 1}: GPU{i}-GPU{j} "
                                         f"is {c!r}, not a -p2p status ({', '.join(sorted(P2P_CODES))})")
            p2p[b["mode"]] = [["X" if i == j else P2P_CODES[c] for j, c in enumerate(row)]
                              for i, row in enumerate(b["cells"])]
    nv = [int(matrix[i][j][2:]) for i in range(n) for j in range(n) if i != j and matrix[i][j].startswith("NV")]
    all_nv = n > 1 and len(nv) == n * (n - 1)
    switched = all_nv and len(set(nv)) == 1 and nv[0] * (n - 1) > MAX_LINKS_PER_GPU
    gpus, numa_sets = [], []
    for i in range(n):
        g = {"index": i, **{k: NA for k in GPU_KEYS}}
        links = [int(matrix[i][j][2:]) for j in range(n) if j != i and matrix[i][j].startswith("NV")]
        g["nvlink_active_links"] = NA if pci_only else (links[0] if switched else sum(links)) if links else 0
        g["cpu_affinity"] = t["cpu"][i] if t["cpu"][i] not in ("N/A", "") else NA
        numa = str(t["numa"][i])
        if _NODE_LIST.match(numa):
            nodes = _numa_nodes(numa)
            if not nodes:
                raise UsageError(f"'{os.path.basename(t['file'])}' line {t['line'] + i + 1}: GPU{i}'s NUMA affinity "
                                 f"{shown(numa, 24)} is no NUMA node (Linux numbers them 0..{MAX_NUMA_NODE})")
            # one node: its number; several (a GPU near more than one): the list as nvidia-smi prints it
            g["numa_node"] = int(numa) if numa.isdigit() else numa
            numa_sets.append(nodes)
        elif numa in ("N/A", NA, ""):
            g["numa_node"] = NA
        else:
            raise UsageError(f"'{os.path.basename(t['file'])}' line {t['line'] + i + 1}: GPU{i}'s NUMA affinity "
                             f"{shown(numa, 24)} is neither a node number, a node list (0-1) nor N/A")
        gpus.append(g)
    cls = "unknown" if pci_only else classify_pairs(matrix, p2p, switched)
    numa_nodes = set().union(*numa_sets)
    nics = _nic_list(t)
    notes = [f"imported from nvidia-smi topo text ({', '.join(os.path.basename(p) for p in paths)}): GPU names, "
             "PCIe generation and NVLink version are not in it"]
    if pci_only:
        notes.append("this is 'nvidia-smi topo -mp' (PCIe paths only): NVLink pairs show their PCIe path there, "
                     "so the interconnect is not known from it; pass 'nvidia-smi topo -m' output")
    if nics:
        near = [f"{x['device'] if x['device'] != NA else x['name']}: GPU{','.join(map(str, x['near_gpus']))}"
                for x in nics if x["near_gpus"]]
        notes.append(f"{len(nics)} NIC(s) ({', '.join(x['device'] if x['device'] != NA else x['name'] for x in nics)})"
                     + (f"; at most a PCIe switch from a GPU (PIX/PXB, GPUDirect RDMA at full rate): {'; '.join(near)}"
                        if near else "; none within a PCIe switch of a GPU (PIX/PXB)"))
    if switched:
        notes.append(f"every pair NV{nv[0]}: {nv[0]} x {n - 1} peers is more links than a GPU has, so the "
                     "GPUs meet in NVSwitches")
    if any(b["kind"] == "p2p" and b["mode_assumed"] for b in blocks):
        notes.append("a -p2p matrix with no '-p2p r|w' line before it (nor p2p_r/p2p_w in the file name) is read "
                     "as -p2p r")
    if not any(k in p2p for k in ("read", "write")) and cls == "pcie":
        notes.append("P2P status not given: pass 'nvidia-smi topo -p2p r' output too")
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    off = sorted({p2p[op][i][j] for op in ("read", "write") if op in p2p for i, j in pairs
                  if p2p[op][i][j] != "OK"})
    if off:
        notes.append(f"P2P is off between some GPUs ({', '.join(off)}): NCCL then moves data through host "
                     "shared memory (SHM)")
    if cls not in ("nvswitch", "nvlink") and any(matrix[i][j] == "SYS" for i, j in pairs):
        notes.append("some pairs are SYS (across NUMA nodes): a TP group spanning them crosses the CPU interconnect")
    return {
        "kind": "imported",
        "source": "nvidia-smi topo text" + (" -mp" if pci_only else " -m") + (" + -p2p " + "/".join(sorted(p2p)) if p2p else ""),
        "source_files": [shown_path(p) for p in paths],
        "commprof_version": __version__,
        "driver_version": NA,
        "host": NA,
        "collected_at": now_iso(),
        "gpu_count": n,
        "gpus": gpus,
        "matrix": matrix,
        "p2p": p2p,
        "p2p_given": sorted(p2p),
        "interconnect_class": cls,
        "numa_nodes": len(numa_nodes) if numa_nodes else NA,
        "nics": nics,
        "notes": notes,
    }


def run_import_smi_topo(paths: list[str], out_dir: str, command=None) -> int:
    """Parse, write ``topo.json`` and ``meta.json`` into a new ``out_dir``, print one line; exit code."""
    import sys

    topo = parse_smi_topo(paths)
    results.check_out_dir(out_dir, resume=False)
    with all_or_none(os.path.join(out_dir, TOPO_JSON), os.path.join(out_dir, results.META_JSON)):
        write_topology(topo, os.path.join(out_dir, TOPO_JSON))
        results.write_meta(out_dir, results.provenance(
            "import", "imported", "nvidia-smi topo text imported as topo.json (commprof import nvidia-smi-topo)",
            status="complete", command=list(command) if command is not None else list(sys.argv), hosts=[], gpus=[],
            source_files=[{"path": shown_path(p), "sha256": results.file_sha256(p)} for p in paths],
            interconnect_class=topo["interconnect_class"], p2p_given=topo["p2p_given"]))
    print(f"imported nvidia-smi topology: {topo['gpu_count']} GPUs, interconnect class "
          f"{topo['interconnect_class']} (P2P {'from -p2p ' + '/'.join(topo['p2p_given']) if topo['p2p_given'] else 'not given'}) "
          f"into {out_dir}")
    return 0
