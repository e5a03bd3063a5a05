"""What NCCL's own account of a box means for a buyer: check items over an imported NCCL_DEBUG log.

Each item reads the account's summary (``ingest.nccldebug.summary``) and its communicator and
pair rows, and gives a verdict (PASS, WARN, FAIL, INFO or SKIP), the evidence it rests on (the
log's own lines, counted) and what a buyer does next. The evidence is always the engine's own
log: no item here compares with another box.
"""
from __future__ import annotations

from commprof.analysis.thresholds import load_thresholds
from commprof.model.errors import UsageError

#: NCCL_P2P_LEVEL values that forbid P2P over PCIe (NCCL's path types: LOC, NVL, PIX, PXB, PHB, SYS;
#: a level at or below NVL allows P2P only over NVLink); the thresholds file's
#: ``nccl_debug.p2p_blocking_levels`` is what the items use
P2P_BLOCKING_LEVELS = {"0", "LOC", "NVL"}
VERDICT_WORDS = ("PASS", "WARN", "FAIL")
#: NCCL WARN lines that say nothing is wrong: NCCL up to 2.18 warns "Failed to open libibverbs.so[.1]"
#: (src/misc/ibvwrap.cc) on every host without the InfiniBand verbs library, which later releases print at
#: INFO (NVIDIA/nccl#1817 shows it as INFO under 2.20.5); the network choice (N2) judges what it means
#: libfabric providers that carry NCCL's traffic over TCP, not RDMA (aws-ofi-nccl's 'Selected Provider is tcp')
TCP_PROVIDERS = ("tcp", "sockets", "tcp;ofi_rxm", "udp", "udp;ofi_rxd")
BENIGN_WARNINGS = ("Failed to open libibverbs.so",)


def _item(item_id, title, verdict, evidence, what_now):
    if not what_now:          # every item says what to do: a PASS or INFO needs nothing more
        what_now = ("Accept on this item; keep the log with the purchase record." if verdict == "PASS" else
                    "Nothing to decide on this line alone; keep the log with the purchase record.")
    return {"id": item_id, "item": title, "verdict": verdict, "evidence": evidence, "what_now": what_now}


def _intra_pairs(comms, pairs, cls):
    """Pairs inside a node whose transport is ``cls`` (P2P or SHM): NCCL connects two ranks with
    either only when they share a host (src/transport/p2p.cc and shm.cc compare the peers' host
    hashes; P2P across hosts is MNNVL, still GPU to GPU), so every such pair counts, in a
    communicator of one node or one that spans nodes (a TP group of 16 over 2 nodes: its pairs
    inside each node)."""
    return [p for p in pairs if p["transport_class"] == cls]


def _distinct(pairs) -> int:
    """Rank pairs counted as the one-glance table counts them: one per (communicator, sender,
    receiver), whatever the channels, directions and NICs of its lines."""
    return len({(p["comm"], p["src_rank"], p["dst_rank"]) for p in pairs})


def _refused(acc: dict) -> str:
    """NCCL's own lines that the platform refused P2P ('P2P is disabled between connected GPUs a and b',
    'Could not enable P2P between dev a and dev b'), where the log has them."""
    lines = acc.get("p2p_refused") or []
    return f"; NCCL says so itself in {len(lines)} line(s), first: {lines[0]}" if lines else ""


def _layers(acc: dict) -> str:
    layers = acc.get("rdma_link_layers") or []
    return f" (link layer {', '.join(layers)}, from NET/IB's device list)" if layers else ""


def _rdma_words(acc: dict) -> str:
    """What NCCL's IB transport found: RDMA NICs it listed (then Socket was chosen over a NIC that
    exists) or no device at all (the pods or hosts were given none)."""
    nics = acc.get("rdma_nics") or {}
    efa = {h: n for p, v in (acc.get("ofi_providers") or {}).items() if p not in TCP_PROVIDERS for h, n in v.items()}
    if efa and not nics:
        return (f"; yet aws-ofi-nccl found {sum(efa.values())} RDMA NIC(s) ({', '.join(sorted({p for p in acc['ofi_providers'] if p not in TCP_PROVIDERS}))}) "
                f"on {len(efa)} host(s)")
    if nics:
        n = sum(len(v) for v in nics.values())
        return (f"; yet NCCL's IB transport listed {n} RDMA device(s) on {len(nics)} host(s) "
                f"({', '.join(acc.get('rdma_link_layers') or []) or 'link layer not printed'})")
    if acc.get("ib_no_device_on"):
        return f"; NCCL's IB transport found no RDMA device on {len(acc['ib_no_device_on'])} host(s)"
    return ""


def _multi_node(comms):
    return [c for c in comms if (c.get("nnodes") or 0) > 1]


def _levels(t: dict) -> dict:
    """The verdict each finding gets (``[nccl_debug]`` of the thresholds file), checked."""
    keys = ("shm_with_override", "shm_platform", "socket_multinode", "net_without_gdr", "nvls_unused",
            "custom_ar_off_supported", "fewer_than_sold", "nccl_warnings")
    out = {k: str(t[k]).upper() for k in keys}
    for k, v in out.items():
        if v not in VERDICT_WORDS:
            raise UsageError(f"thresholds: nccl_debug.{k} = '{t[k]}': give one of {', '.join(VERDICT_WORDS)}")
    return out


def engine_items(acc: dict, comms: list[dict], pairs: list[dict], expect_gpus: int | None = None,
                 expect_nodes: int | None = None, th: dict | None = None) -> list[dict]:
    """The check items of one NCCL_DEBUG account (``acc``: the summary dict); verdicts and "what now"
    texts from ``th`` (the thresholds, default ``commprof/data/thresholds.toml``), ``[nccl_debug]``."""
    t = (th or load_thresholds())["nccl_debug"]
    lv = _levels(t)
    blocking = {str(x).upper() for x in t["p2p_blocking_levels"]}
    items = []
    if not acc.get("nccl_lines"):
        why = ("the log has no NCCL INFO line: NCCL_DEBUG was not set to INFO for this run, or its lines went "
               "to another file (NCCL_DEBUG_FILE)")
        items.append(_item("N0", "NCCL's own account is in the log", "INSUFFICIENT", why, t["what_now_no_log"]))
    env = acc.get("env_overrides", {})
    # N1: GPUs of one node talking through host memory
    shm = _intra_pairs(comms, pairs, "SHM")
    p2p = _intra_pairs(comms, pairs, "P2P")
    blockers = []
    if any(v in ("1", "true", "True") for v in env.get("NCCL_P2P_DISABLE", [])):
        blockers.append("NCCL_P2P_DISABLE=1")
    for v in env.get("NCCL_P2P_LEVEL", []):
        if v.upper() in blocking:
            blockers.append(f"NCCL_P2P_LEVEL={v}")
    if shm:
        n = _distinct(shm)
        if blockers:
            items.append(_item("N1", "GPUs of one node talk directly (P2P), not through host memory",
                               lv["shm_with_override"],
                               f"{n} rank pair(s) inside one node go via SHM (host memory), and the log says "
                               f"{', '.join(blockers)} was set by the environment",
                               t["what_now_shm_override"].format(
                                   names=" and ".join(b.split("=")[0] for b in blockers))))
        else:
            items.append(_item("N1", "GPUs of one node talk directly (P2P), not through host memory",
                               lv["shm_platform"],
                               f"{n} rank pair(s) inside one node go via SHM (host memory) with no NCCL override "
                               "in the log: the platform refused P2P (PCIe ACS or IOMMU on, a VM without P2P, "
                               "a GeForce driver that does not allow it, or on an NVSwitch box its fabric manager "
                               "not running)" + _refused(acc),
                               t["what_now_shm_platform"]))
    elif p2p:
        items.append(_item("N1", "GPUs of one node talk directly (P2P), not through host memory", "PASS",
                           f"{_distinct(p2p)} rank pair(s) inside one node go via P2P", ""))
    elif acc.get("p2p_refused"):     # a fragment with NCCL's refusal lines but no channel line: the refusal decides
        lines = acc["p2p_refused"]
        items.append(_item("N1", "GPUs of one node talk directly (P2P), not through host memory",
                           lv["shm_with_override"] if blockers else lv["shm_platform"],
                           f"no channel line printed, but NCCL says the platform refused P2P between GPUs "
                           f"({len(lines)} line(s), first: {lines[0]}): their traffic goes through host memory"
                           + (f"; {', '.join(blockers)} set by the environment too" if blockers else ""),
                           t["what_now_shm_platform"]))
    # N2: nodes joined over TCP
    multi = _multi_node(comms)
    socket_pairs = [p for p in pairs if p["transport_class"] == "NET/Socket"]
    # NCCL connects two ranks over the network only when no P2P or SHM path joins them (another node, or
    # a GPU of this host in another container): a fragment's NET channel lines say so without a node count
    net_pairs = [p for p in pairs if p["transport_class"].startswith("NET/")]
    if multi or net_pairs:
        nets = sorted(acc.get("networks", {}))
        span = (f"{len(multi)} communicator(s) span {max(c['nnodes'] for c in multi)} nodes" if multi else
                f"{_distinct(net_pairs)} rank pair(s) go over the network (node count not printed)")
        provs = acc.get("ofi_providers") or {}
        ofi_tcp = sorted(p for p in provs if p in TCP_PROVIDERS)
        if ofi_tcp and not [p for p in provs if p not in TCP_PROVIDERS] and not socket_pairs and nets != ["Socket"]:
            items.append(_item("N2", "nodes are joined over RDMA (InfiniBand/RoCE/EFA), not TCP sockets",
                               lv["socket_multinode"],
                               f"{span} over 'Using network {', '.join(nets) or 'Libfabric'}', but aws-ofi-nccl says "
                               f"'Selected Provider is {ofi_tcp[0]}': Libfabric over TCP, no EFA device in use",
                               t["what_now_socket"]))
        elif socket_pairs or nets == ["Socket"]:
            items.append(_item("N2", "nodes are joined over RDMA (InfiniBand/RoCE/EFA), not TCP sockets",
                               lv["socket_multinode"],
                               f"{span} and the log says 'Using network {', '.join(nets) or 'Socket'}'"
                               + (f"; {_distinct(socket_pairs)} rank pair(s) via NET/Socket" if socket_pairs else "")
                               + _rdma_words(acc),
                               t["what_now_socket"]))
        elif not nets and not net_pairs:
            items.append(_item("N2", "nodes are joined over RDMA (InfiniBand/RoCE/EFA), not TCP sockets", "INFO",
                               f"{span}, but the log names no network ('Using network ..') and has no network "
                               "channel line: how the nodes are joined is not in it",
                               "Send the whole log (NCCL_DEBUG_SUBSYS=INIT,NET) to see the network NCCL chose."))
        else:
            gdr = [p for p in pairs if p["transport_class"].startswith("NET/") and "GDRDMA" in p["transport"]]
            net = net_pairs
            verdict = "PASS" if gdr or not net else lv["net_without_gdr"]
            items.append(_item("N2", "nodes are joined over RDMA (InfiniBand/RoCE/EFA), not TCP sockets", verdict,
                               f"network {', '.join(nets) or 'not named in the log'}{_layers(acc)}; {_distinct(net)} rank pair(s) over the network, {_distinct(gdr)} with "
                               "GPUDirect RDMA (GDRDMA)",
                               "" if verdict == "PASS" else t["what_now_no_gdr"]))
    # N7: nodes of one multi-node NVLink domain (a GB200 NVL72 rack) joined over the network instead of MNNVL
    fab = acc.get("nvlink_fabric") or {}
    if fab.get("multi_node_domain_hosts", 0) > 1 and multi:
        off = [c for c in multi if c.get("mnnvl") == 0]
        on = [c for c in multi if c.get("mnnvl")]
        if off or (net_pairs and not on):
            cumem = env.get("NCCL_CUMEM_ENABLE", [])
            mn = env.get("NCCL_MNNVL_ENABLE", [])
            items.append(_item("N7", "nodes of one NVLink domain talk over NVLink (MNNVL), not the network",
                               str(t.get("mnnvl_unused", "WARN")).upper(),
                               f"NCCL lists {fab['multi_node_domain_gpus']} GPU(s) on {fab['multi_node_domain_hosts']} "
                               f"hosts in a multi-node NVLink domain, yet "
                               + (f"{len(off)} multi-node communicator(s) print MNNVL 0" if off else
                                  f"{_distinct(net_pairs)} rank pair(s) go over the network")
                               + "".join(f"; {k}={v[0]} set by the environment" for k, v in
                                         (("NCCL_CUMEM_ENABLE", cumem), ("NCCL_MNNVL_ENABLE", mn)) if v),
                               t.get("what_now_mnnvl", "")))
        elif on:
            items.append(_item("N7", "nodes of one NVLink domain talk over NVLink (MNNVL), not the network", "PASS",
                               f"{len(on)} multi-node communicator(s) print MNNVL 1", ""))
    # N3: NVLS available, not used
    nv = acc.get("nvls", {})
    nvls_channels = [c.get("nvls_channels") for c in comms if c.get("nvls_channels") is not None]
    if acc.get("nvls_setup_failed"):   # NCCL WARN from src/transport/nvls.cc: the switch's multicast did not set up
        failed = acc["nvls_setup_failed"]
        items.append(_item("N3", "NVLink SHARP (NVLS) is used where the switch offers it", lv["nvls_unused"],
                           f"NVLS setup failed: {len(failed)} NCCL WARN line(s) from transport/nvls.cc, first: "
                           f"{failed[0]}",
                           "Check the NVSwitch fabric (nvidia-smi -q: Fabric State; the fabric manager service) and "
                           "NVLS with nvbandwidth's multicast tests; NCCL_NVLS_ENABLE=0 runs without it meanwhile."))
    elif nv.get("available_on"):
        off = env.get("NCCL_NVLS_ENABLE", [])
        if nvls_channels and max(nvls_channels) == 0:
            items.append(_item("N3", "NVLink SHARP (NVLS) is used where the switch offers it", lv["nvls_unused"],
                               f"NVLS multicast is available on {nv['available_on']} GPU(s) but every communicator "
                               "has 0 nvls channels" + (f"; NCCL_NVLS_ENABLE={off[0]} set by the environment" if off
                                                        else ""),
                               t["what_now_nvls"]))
        elif nvls_channels or any(c.get("nvls_heads") for c in comms):
            items.append(_item("N3", "NVLink SHARP (NVLS) is used where the switch offers it", "PASS",
                               f"NVLS available on {nv['available_on']} GPU(s), nvls channels {max(nvls_channels or [0])}"
                               + ("; NVLS buffers set up" if any(c.get("nvls_heads") for c in comms) else ""),
                               ""))
        else:                    # a fragment: the switch offers NVLS, whether a communicator used it is not printed
            items.append(_item("N3", "NVLink SHARP (NVLS) is used where the switch offers it", "INFO",
                               f"NVLS multicast is available on {nv['available_on']} GPU(s); no 'nvls channels' count "
                               "or NVLS setup line is in the log, so whether it is used is not known",
                               "Send the whole log (NCCL_DEBUG_SUBSYS=INIT) to see the nvls channel count."))
    elif env.get("NCCL_NVLS_ENABLE") and env["NCCL_NVLS_ENABLE"][0] in ("0", "false"):
        items.append(_item("N3", "NVLink SHARP (NVLS) is used where the switch offers it", "INFO",
                           "NCCL_NVLS_ENABLE=0 set by the environment; whether the switch offers NVLS is not in the "
                           "log", "On an NVSwitch box (H100/H200/B200 HGX), re-test with NCCL_NVLS_ENABLE unset."))
    # N4: the engine's custom all-reduce
    eng = acc.get("engine", {})
    if eng.get("custom_all_reduce") == "off":
        why = eng.get("custom_all_reduce_why", "")
        if "more than two PCIe-only" in why:
            items.append(_item("N4", "the engine's custom all-reduce is on where the box supports it", "INFO",
                               f"the engine says custom all-reduce is disabled because {why}: expected on this box, "
                               "NCCL does every all-reduce", "Nothing to fix; price TP>2 on this box with NCCL's "
                               "figures (commprof predict does)."))
        else:
            supports = bool(_intra_pairs(comms, pairs, "P2P")) or bool(blockers)
            items.append(_item("N4", "the engine's custom all-reduce is on where the box supports it",
                               lv["custom_ar_off_supported"] if supports else "INFO",
                               f"custom all-reduce off ({why})" + ("; the GPUs do P2P (or would, without the "
                                                                   "override), so it could be on" if supports else ""),
                               t["what_now_custom_ar"] if supports else ""))
    elif eng.get("custom_all_reduce") == "on":
        items.append(_item("N4", "the engine's custom all-reduce is on where the box supports it", "PASS",
                           "the engine lists CUSTOM among its all-reduce backends", ""))
    # N5: fewer GPUs or nodes than sold
    if expect_gpus or expect_nodes:
        most = max((c.get("nranks") or 0 for c in comms), default=0)
        nodes = max((c.get("nnodes") or 0 for c in comms), default=0) or len(acc.get("hosts", []))
        short = []
        if expect_gpus and most < expect_gpus:
            short.append(f"the largest communicator has {most} rank(s), {expect_gpus} GPUs were sold")
        if expect_nodes and nodes < expect_nodes:
            short.append(f"the log shows {nodes} node(s), {expect_nodes} were sold")
        items.append(_item("N5", "the log shows the GPUs and nodes that were sold",
                           lv["fewer_than_sold"] if short else "PASS",
                           "; ".join(short) or f"{most} ranks, {nodes} node(s)",
                           t["what_now_fewer"] if short else ""))
    # N6: NCCL's own warnings
    warns = acc.get("warnings", [])
    real = [w for w in warns if not any(b in w for b in BENIGN_WARNINGS)]
    if real:
        items.append(_item("N6", "NCCL printed no warnings", lv["nccl_warnings"],
                           f"{len(real)} NCCL WARN line(s); first: {real[0]}"
                           + (f"; {len(warns) - len(real)} more NCCL prints on a healthy box" if len(real) < len(warns)
                              else ""), t["what_now_warnings"]))
    elif warns:
        items.append(_item("N6", "NCCL printed no warnings", "INFO",
                           f"{len(warns)} NCCL WARN line(s), each one NCCL prints on a healthy box without that "
                           f"library or device (later NCCL prints it as INFO); first: {warns[0]}", ""))
    return items
