"""commprof import nccl-debug against NCCL's own format strings, version by version.

Every line below is our own test line: a format string of NVIDIA/nccl filled in with made-up values,
the file and release tag named beside it (read in a snapshot of github.com/NVIDIA/nccl at tags
v2.12.12-1 .. v2.30.7-1). None is copied from a log. They hold the shapes the shared real logs
(NCCL 2.21, 2.27, 2.28) do not: older and newer Init lines, split communicators, network names with
a space, PXN and (PCI) GDR tokens, WARN lines, CollNet, NVLS set-up, MNNVL cliques, P2P refused by
the platform. Consistency with the source, not truth: a real log of each kind judges it later.
"""
from commprof.analysis.ncclverdict import engine_items
from commprof.analysis.thresholds import load_thresholds
from commprof.ingest.nccldebug import comm_rows, pair_rows, read_logs, summary, transport_class, transport_label

PRE = "boxa:4242:4243 [{dev}] NCCL INFO "


def _log(tmp_path, lines, name="nccl.log"):
    p = tmp_path / name
    p.write_text("".join((ln if " NCCL " in ln else PRE.format(dev=0) + ln) + "\n"
                         for ln in lines))
    return str(p)


def _read(*paths):
    acc = read_logs(list(paths))
    info, comms, pairs = summary(acc), comm_rows(acc), pair_rows(acc)
    return acc, info, {c["comm"]: c for c in comms}, pairs, {i["id"]: i for i in engine_items(info, comms, pairs)}


# (version where the shape was read, src/init.cc line) -> what the reader must get from it
INIT_SHAPES = [
    # v2.12.12-1 src/init.cc: "comm %p rank %d nranks %d cudaDev %d busId %lx - Init COMPLETE"
    ("comm 0x55aa00 rank 1 nranks 2 cudaDev 1 busId 1b000 - Init COMPLETE", "boxa:4242:0x55aa00", 2, 1),
    # v2.16.2-1: "... busId %lx commId 0x%llx - Init COMPLETE"
    ("comm 0x55aa00 rank 1 nranks 2 cudaDev 1 busId 1b000 commId 0x9f00aa11 - Init COMPLETE", "0x9f00aa11", 2, 1),
    # v2.18.3-1 .. v2.20.5-1: "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START"
    ("comm 0x55aa00 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x9f00aa12 - Init START",
     "0x9f00aa12", 4, 0),
    # v2.21.5-1: "ncclCommInitRank comm %p ... commId 0x%llx - Init COMPLETE"
    ("ncclCommInitRank comm 0x55aa00 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x9f00aa13 - Init "
     "COMPLETE", "0x9f00aa13", 4, 1),
    # v2.23.4-1 on: "%s comm %p ..." with the function's name: ncclCommInitAll
    ("ncclCommInitAll comm 0x55aa00 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x9f00aa14 - Init "
     "COMPLETE", "0x9f00aa14", 4, 1),
    # v2.29.2-1 on: "[Rank %d] %s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START"
    ("[Rank 1] ncclCommInitRankConfig comm 0x55aa00 rank 1 nranks 8 cudaDev 1 nvmlDev 1 busId 1b000 "
     "commId 0x9f00aa15 - Init START", "0x9f00aa15", 8, 0),
]


def test_every_init_line_shape_from_2_12_to_2_30_is_read(tmp_path):
    """The old reader took only lines led by ncclCommInitRank*: NCCL 2.12-2.20 (no function name),
    ncclCommInitAll and 2.29's '[Rank R] ' START line gave no communicator, rank or busId."""
    for i, (line, key, nranks, complete) in enumerate(INIT_SHAPES):
        acc, info, comms, _, _ = _read(_log(tmp_path, [line], f"init{i}.log"))
        assert list(comms) == [key], line
        c = comms[key]
        assert (c["nranks"], c["ranks_seen"], c["init_complete"]) == (nranks, 1, complete), line
        assert acc.host_bus == {"boxa": {"1b000"}}, line


def test_split_communicators_of_two_processes_are_one_communicator(tmp_path):
    """2.23 on, a split child's Init lines carry no commId but 'parent P splitCount S color C key K'
    (v2.24.3-1 src/init.cc; 'childCount' from v2.29.2-1): each rank's parent pointer differs, its
    parent's commId does not, so the two ranks' children are one communicator of 2, not two of 1."""
    a = _log(tmp_path, [
        PRE.format(dev=0) + "ncclCommInitRank comm 0x1000 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 "
                            "commId 0x77aa - Init COMPLETE",
        PRE.format(dev=0) + "ncclCommSplit comm 0x2000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0x1000 "
                            "splitCount 1 color 0 key 0- Init START",
        PRE.format(dev=0) + "ncclCommSplit comm 0x2000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0x1000 "
                            "splitCount 1 color 0 key 0 - Init COMPLETE",
    ], "r0.log")
    b = _log(tmp_path, [
        "boxa:5555:5556 [1] NCCL INFO ncclCommInitRank comm 0x9000 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 2c000 "
        "commId 0x77aa - Init COMPLETE",
        "boxa:5555:5556 [1] NCCL INFO [Rank 1] ncclCommSplit comm 0xa000 rank 1 nranks 2 cudaDev 1 nvmlDev 1 "
        "busId 2c000 parent 0x9000 childCount 1 color 0 key 1- Init START",
    ], "r1.log")
    _, _, comms, _, _ = _read(a, b)
    assert comms["0x77aa"]["ranks_seen"] == 2
    child = comms["0x77aa/split1/color0"]
    assert (child["nranks"], child["ranks_seen"], child["init_complete"], child["init_func"]) == \
        (2, 2, 1, "ncclCommSplit")
    # 2.21-2.22 print a split child's commId (its parent's hash and color): that is its key
    c = _log(tmp_path, ["ncclCommSplit comm 0x2000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0x1000 "
                        "color 1 key 0 commId 0x5151 - Init COMPLETE"], "r2.log")
    _, _, comms, _, _ = _read(c)
    assert list(comms) == ["0x5151"]


def test_transport_tokens_as_the_transports_print_them(tmp_path):
    """The old reader cut the token at its first space ('P2P/direct pointer' -> 'P2P/direct',
    'NET/AWS Libfabric/0' -> 'NET/AWS') and missed GDRDMA in 'GDRDMA(PCI)'."""
    log = _log(tmp_path, [
        # NCCL 2.21 layout: 'comm ... nRanks ... nNodes' (src/init.cc, v2.20.3-1 on)
        "comm 0x1000 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
        # src/transport/p2p.cc (v2.18.3-1 .. v2.30): direct pointer, CUMEM/read + /CE (copy engine), indirect
        "Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer/read",
        "Channel 01/0 : 0[0] -> 2[2] via P2P/CUMEM/read/CE",
        "Channel 02/0 : 0[0] -> 3[3] via P2P/indirect/1[1]/read",
        # src/transport/net.cc (v2.26.2-1 on): PXN proxy rank, GDR over PCI, shared buffers
        "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA(PCI)/Shared",
        # the network name aws-ofi-nccl gave itself up to 1.11 ('AWS Libfabric', with a space)
        "Using network AWS Libfabric",
        "Channel 01/0 : 0[0] -> 9[1] [send] via NET/AWS Libfabric/1/GDRDMA",
    ])
    _, info, comms, pairs, items = _read(log)
    got = {(p["src_rank"], p["dst_rank"]): p["transport"] for p in pairs}
    assert got == {(0, 1): "P2P/direct pointer/read", (0, 2): "P2P/CUMEM/read/CE", (0, 3): "P2P/indirect/1[1]/read",
                   (0, 8): "NET/IB/0(1)/GDRDMA(PCI)/Shared", (0, 9): "NET/AWS Libfabric/1/GDRDMA"}
    assert info["networks"] == {"AWS Libfabric": ["boxa"]}
    assert "P2P/direct pointer" in comms["boxa:4242:0x1000"]["transports"]
    assert "GDRDMA" in items["N2"]["evidence"] and items["N2"]["verdict"] == "PASS"
    assert transport_label("NET/IB/0(1)/GDRDMA(PCI)/Shared") == "NET/IB/GDRDMA"
    assert transport_label("NET/AWS Libfabric/1/GDRDMA") == "NET/AWS Libfabric/GDRDMA"
    assert transport_class("NET/AWS Libfabric/1/GDRDMA") == "NET/AWS Libfabric"
    # src/transport/shm.cc: 'via SHM/%s/%s' to v2.29, 'via SHM/direct' in v2.30 (no /connIndex either way)
    shm = _log(tmp_path, ["Channel 00 : 0[0] -> 1[1] via SHM/direct", "Channel 01 : 1[1] -> 0[0] via SHM/CE/direct"],
               "shm.log")
    _, _, _, pairs, _ = _read(shm)
    assert sorted(transport_label(p["transport"]) for p in pairs) == ["SHM", "SHM"]


def test_warn_lines_with_their_source_location_are_read(tmp_path):
    """src/debug.cc puts the file and line (and from 2.30 the function) between the device and
    'NCCL WARN': the old reader's prefix never matched a real WARN line, so N6 never fired."""
    log = _log(tmp_path, [
        "boxa:4242:4243 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
        "boxa:4242:4243 [0] transport/net_ib.cc:101 NCCL WARN a test warning written for this test",
        "boxa:4242:4243 [0] transport/net.cc:202 (sendConnect) NCCL WARN a second test warning",
    ])
    acc, info, _, _, items = _read(log)
    assert acc.nccl_lines == 3 and len(info["warnings"]) == 2
    assert items["N6"]["evidence"].startswith("2 NCCL WARN line(s)")


def test_collnet_nvls_mnnvl_and_connected_lines(tmp_path):
    log = _log(tmp_path, [
        "ncclCommInitRankConfig comm 0x1000 rank 0 nranks 72 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xbeef "
        "- Init START",
        # src/mnnvl.cc (v2.30): '... cliqueRank %d nvlDomainSize %d'; v2.21-v2.24 src/init.cc ended '... cliqueRank %d '
        "MNNVL 1 cliqueId 7 cliqueSize 72 cliqueRank 0 nvlDomainSize 72",
        "comm 0x1000 rank 0 nRanks 72 nNodes 18 localRanks 4 localRank 0 MNNVL 1",
        # src/transport/p2p.cc: the MNNVL name in place of CUMEM
        "Channel 00/0 : 0[0] -> 5[1] via P2P/MNNVL/read",
        # src/transport/coll_net.cc: 'CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s'
        "CollNet 00/0 : 0 [send] via COLLNET/IBext_v8/0/GDRDMA",
        "CollNet 00/0 : 0 [receive] via COLLNET/IBext_v8/0/GDRDMA",
        # src/transport/nvls.cc (v2.27.3-1 on, 'nvlsRanks' added)
        "NVLS comm 0x1000 headRank 0 nHeads 4 nvlsRanks 4 buffSize 1048576 nvlsPerRankSize 33554432 "
        "nvlsTotalSize 134217728",
        # src/transport/generic.cc (v2.24.3-1 on) and nvls.cc
        "Connected all rings, use ring PXN 0 GDR 1",
        "Connected all trees",
        "Connected NVLS tree",
        # src/graph/search.cc: path types with digits (topoPathTypeStr: C2C, P2C)
        "Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type C2C/PIX, sameChannels 1",
    ])
    acc, _, comms, pairs, _ = _read(log)
    c = comms["0xbeef"]
    assert (c["mnnvl"], c["mnnvl_clique_size"], c["nvls_heads"], c["collnet_connections"]) == (1, 72, 4, 2)
    assert c["connected"] == "all rings,all trees,nvls tree" and c["ring_pxn_gdr"] == "PXN 0 GDR 1"
    assert "MNNVL on (clique of 72 GPUs)" in c["summary"] and "NVLS set up (4 heads)" in c["summary"]
    assert [p["transport"] for p in pairs] == ["P2P/MNNVL/read"]
    assert acc.graph_types == {"C2C": 1}
    # v2.21.5-1 src/init.cc: the clique line with its trailing space
    old = _log(tmp_path, ["comm 0x1000 rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 1",
                          "MNNVL 1 cliqueId 7 cliqueSize 8 cliqueRank 0 "], "old.log")
    _, _, comms, _, _ = _read(old)
    assert comms["boxa:4242:0x1000"]["mnnvl_clique_size"] == 8


def test_platform_refusing_p2p_is_named_in_n1(tmp_path):
    """src/graph/paths.cc prints 'P2P is disabled between connected GPUs a and b' (v2.18-v2.30) and
    p2p.cc 'Could not enable P2P between dev a(=busId) and dev b(=busId)': NCCL's own word that the
    platform refused P2P, which N1 now cites where SHM pairs have no override behind them."""
    log = _log(tmp_path, [
        "comm 0x1000 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "P2P is disabled between connected GPUs 0 and 1. You can repress this message with "
        "NCCL_IGNORE_DISABLED_P2P=1.",
        "Could not enable P2P between dev 0(=1b000) and dev 1(=2c000)",
        "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
    ])
    _, info, _, _, items = _read(log)
    assert len(info["p2p_refused"]) == 2 and info["p2p_refused"][0].startswith("boxa: GPU 0 and GPU 1")
    assert items["N1"]["verdict"] == load_thresholds()["nccl_debug"]["shm_platform"].upper()
    assert "NCCL says so itself in 2 line(s)" in items["N1"]["evidence"]


def test_timestamped_prefix_and_param_values_with_a_dot(tmp_path):
    """NCCL_DEBUG_TIMESTAMP_FORMAT puts '[date time] ' before the host (src/debug.cc); src/misc/param.cc
    ends a value with '.', src/graph/paths.cc does not."""
    log = _log(tmp_path, [
        "[2026-01-01 12:00:00] boxa:4242:4243 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1",
        "[2026-01-01 12:00:00] boxa:4242:4243 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.",
        "[2026-01-01 12:00:00] boxa:4242:4243 [0] NCCL INFO NCCL version 2.30.3+cuda13.0",
    ])
    _, info, _, _, _ = _read(log)
    assert info["env_overrides"] == {"NCCL_NVLS_ENABLE": ["0"], "NCCL_P2P_DISABLE": ["1"]}
    assert info["nccl_version"] == ["2.30.3"] and info["cuda_version"] == ["13.0"]


def test_node_count_of_logs_before_2_20_comes_from_the_hostnames(tmp_path):
    """NCCL 2.12-2.19 print no 'nRanks N nNodes K' line (src/init.cc has it from v2.20.3-1): with every
    rank's Init line seen, the hostnames that printed them give the nodes, so a two-node group over
    TCP sockets is judged (N2); the old reader left its node count empty and gave no N2 at all."""
    log = _log(tmp_path, [
        # v2.19.3-1 src/init.cc: 'comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE'
        "boxa:4242:4243 [0] NCCL INFO Using network Socket",
        "boxa:4242:4243 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
        "boxa:4242:4243 [0] NCCL INFO comm 0x1000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x6161 - "
        "Init COMPLETE",
        "boxb:777:778 [0] NCCL INFO Using network Socket",
        "boxb:777:778 [0] NCCL INFO comm 0x2000 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x6161 - "
        "Init COMPLETE",
    ])
    _, _, comms, _, items = _read(log)
    c = comms["0x6161"]
    assert (c["nnodes"], c["nnodes_from"]) == (2, "hostnames") and "over 2 nodes" in c["summary"]
    assert items["N2"]["verdict"] == load_thresholds()["nccl_debug"]["socket_multinode"].upper()
    # a rank not seen: no guess
    part = _log(tmp_path, ["comm 0x1000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x6262 - Init START"],
                "part.log")
    _, _, comms, _, _ = _read(part)
    assert comms["0x6262"]["nnodes"] is None


def test_socket_between_nodes_where_nccl_listed_an_rdma_nic(tmp_path):
    """src/transport/net_ib.cc: 'NET/IB : Using [0]mlx5_0:1/IB ...; OOB ..' lists the NICs it found;
    a run that still says 'Using network Socket' (NCCL_IB_DISABLE, NCCL_NET=Socket) joins its nodes
    over TCP beside an RDMA NIC: N2 says so."""
    lines = []
    for host, rank in (("boxa", 0), ("boxb", 1)):
        pre = f"{host}:{100 + rank}:{200 + rank} [0] NCCL INFO "
        lines += [pre + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.1<0>",
                  pre + "Using network Socket",
                  pre + f"comm 0x{rank + 1}000 rank {rank} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
                  pre + f"Channel 00/0 : {rank}[0] -> {1 - rank}[0] [send] via NET/Socket/0"]
    _, info, _, _, items = _read(_log(tmp_path, lines))
    assert info["rdma_nics"] == {"boxa": ["mlx5_0:1/IB", "mlx5_1:1/IB"], "boxb": ["mlx5_0:1/IB", "mlx5_1:1/IB"]}
    assert "yet NCCL's IB transport listed 4 RDMA device(s) on 2 host(s) (IB)" in items["N2"]["evidence"]


def test_channel_lines_of_nccl_2_12_with_bus_ids_and_old_shm_name(tmp_path):
    """Up to 2.17 the brackets hold the bus id ('%d[%lx]'), and up to 2.12 src/transport/shm.cc names
    SHM 'direct shared memory' (v2.12.12-1): the old reader counted that line as cut short."""
    log = _log(tmp_path, [
        "comm 0x1000 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE",
        "Channel 00 : 0[1b000] -> 1[2c000] via direct shared memory",
        "Channel 01 : 0[1b000] -> 1[2c000] via P2P/IPC/read",
    ])
    acc, info, comms, pairs, items = _read(log)
    assert info["truncated_channel_lines"] == 0
    assert sorted(p["transport_class"] for p in pairs) == ["P2P", "SHM"]
    assert "SHM" in items["N1"]["evidence"]


def test_text_of_another_process_in_the_same_line_is_not_part_of_the_token(tmp_path):
    """Two processes writing one terminal can splice lines (the shared 2.28.9 log has one): the
    token stops where NCCL's own ends, spaces allowed only where NCCL prints them."""
    log = _log(tmp_path, [
        "comm 0x1000 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read INFO 06-17 20:14:19 [monitor.py:81] other text",
        "Channel 01/0 : 0[0] -> 1[1] via P2P/direct pointer/read (Worker pid=1) INFO more",
    ])
    _, _, _, pairs, _ = _read(log)
    assert sorted(p["transport"] for p in pairs) == ["P2P/CUMEM/read", "P2P/direct pointer/read"]
