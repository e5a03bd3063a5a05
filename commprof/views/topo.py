"""The topology of a box (``commprof topo``) as tables: GPUs, the nvidia-smi style matrix, P2P."""
from __future__ import annotations

from commprof.views.console import Col, fit_table, stdout_console
from commprof.model.units import human_bytes

NA = "n/a"


TOPO_LEGEND = ("X = self; NV# = a bonded set of # NVLinks; PIX = at most one PCIe bridge; "
               "PXB = several PCIe bridges, no host bridge; PHB = a PCIe host bridge (the CPU); "
               "NODE = between host bridges of one NUMA node; SYS = across NUMA nodes (QPI/UPI, Infinity Fabric)")


def _bytes_text(v) -> str:
    if v == NA:
        return NA

    return human_bytes(int(v))


def link_text(gen, width) -> str:
    """A PCIe link as ``Gen5 x16``; n/a when NVML (or the imported text) gave either part no answer."""
    return NA if NA in (gen, width) or None in (gen, width) else f"Gen{gen} x{width}"


def render_topology(topo: dict, console=None) -> None:
    """Print the per-GPU table, the ``nvidia-smi topo -m`` matrix, the P2P read and write
    matrices and the interconnect class."""
    from rich.text import Text

    def cell(v, style=""):
        # Text, not a str: a bus id such as 00000000:AB:00.0 must not become an emoji (":ab:")
        return Text(str(v), style=style)

    console = console or stdout_console(160)
    console.print(Text.assemble(("commprof topo", "bold"),
                                f": {topo.get('host', '?')}, driver {topo.get('driver_version', '?')}, "
                                f"{topo.get('source', '?')}, {topo.get('collected_at', '?')}"))
    gpus = topo.get("gpus", [])
    heads = (("GPU", "right", None), ("name", "left", None), ("memory", "right", None), ("bus id", "left", 2),
             ("PCIe now", "left", 1), ("PCIe max", "left", 3), ("GPU max", "left", 2), ("at max", "left", 3),
             ("NUMA", "right", 3), ("CPU affinity", "left", 1), ("BAR1", "right", 0), ("NVLinks", "right", 3),
             ("NVLink ver", "left", 1), ("PCIe replays", "right", 2), ("NVLink errors", "right", 2))
    grows = []
    for g in gpus:
        at_max = g["pcie_at_max"]
        grows.append((cell(g["index"]), cell(g["name"]), cell(_bytes_text(g["memory_total_bytes"])), cell(g["pci_bus_id"]),
                  cell(link_text(g["pcie_link_gen_current"], g["pcie_link_width_current"])),
                  cell(link_text(g["pcie_link_gen_max"], g["pcie_link_width_max"])),
                  cell(NA if g["pcie_link_gen_gpu_max"] == NA else f"Gen{g['pcie_link_gen_gpu_max']}"),
                  cell("yes") if at_max is True else cell("no", "bold red") if at_max is False else cell(NA),
                  cell(g["numa_node"]), cell(g["cpu_affinity"]), cell(_bytes_text(g["bar1_total_bytes"])),
                  cell(g["nvlink_active_links"]), cell(g["nvlink_version"]), cell(g["pcie_replay_count"]),
                  cell(g["nvlink_error_count"])))
    # a column NVML (or the imported text) answered for no GPU holds only n/a: named once, not drawn
    empty = [i for i in range(1, len(heads)) if grows and all(r[i].plain == NA for r in grows)]
    keep = [i for i in range(len(heads)) if i not in empty]
    fit_table("GPUs", [Col(*heads[i]) for i in keep], [[r[i] for i in keep] for r in grows], console=console)
    if empty:
        console.print(Text(f"n/a for every GPU (no answer), not shown: {', '.join(heads[i][0] for i in empty)}"))
    if 7 in keep:               # the 'at max' column is drawn: what it compares
        console.print(Text("PCIe 'at max' compares the max link generation with the GPU's own max; the current "
                           "link drops at idle and is not judged."))

    matrix = topo.get("matrix", [])
    mcols = ([Col("", "left", None)] + [Col(f"GPU{i}", "center", None) for i in range(len(matrix))]
             + [Col("CPU Affinity", "left", 1), Col("NUMA Affinity", "right", 0)])
    mrows = []
    for i, row in enumerate(matrix):
        g = gpus[i] if i < len(gpus) else {}
        mrows.append([f"GPU{i}", *(cell(c) for c in row), cell(g.get("cpu_affinity", NA)), cell(g.get("numa_node", NA))])
    fit_table("topology (nvidia-smi topo -m)", mcols, mrows, console=console)
    console.print(Text(f"legend: {TOPO_LEGEND}"))

    p2p = topo.get("p2p", {})
    for op in ("read", "write"):
        if op not in p2p:
            continue
        fit_table(f"P2P {op} (row -> column)",
                  [Col("", "left", None)] + [Col(f"GPU{i}", "center", None) for i in range(len(p2p[op]))],
                  [[f"GPU{i}", *(cell(P2P_CODE.get(s, s)) for s in row)] for i, row in enumerate(p2p[op])],
                  console=console)
    console.print(Text(f"legend: {P2P_LEGEND}"))
    console.print(Text.assemble(("interconnect class", "bold"), f": {topo.get('interconnect_class', NA)}; "
                                f"GPUs on {topo.get('numa_nodes', NA)} NUMA node(s)"))
    for note in topo.get("notes", []):
        console.print(Text(f"note: {note}"))


P2P_CODE = {"OK": "OK", "chipset not supported": "CNS", "GPU not supported": "GNS",
            "topology not supported": "TNS", "disabled by driver": "DR", "not supported": "NS",
            "unknown": "U", NA: NA, "X": "X"}


P2P_LEGEND = ("OK; CNS = chipset not supported; GNS = GPU not supported; TNS = topology not supported; "
              "DR = disabled by driver (regkey); NS = not supported; U = unknown; n/a = NVML gave no answer")
