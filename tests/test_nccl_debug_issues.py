"""commprof import nccl-debug on real NCCL_DEBUG=INFO output pasted into public GitHub issues
(tests/data/nccl-debug/issue*.log, transcribed from the issue pages named in SOURCE.md there).
Each expectation is what the issue thread says the box had, counted in the paste with grep; each
was wrong before the reader learned the class of line it stands for (a prefix a user redacted or
dropped, NCCL's bare VERSION line, ranks without a commId, a fragment with no channel line)."""
import os

import pytest
from helpers import REPO

from commprof.analysis.ncclverdict import engine_items
from commprof.ingest.nccldebug import comm_rows, pair_rows, read_logs, summary

HERE = os.path.join(REPO, "tests", "data", "nccl-debug")


def _read(name):
    acc = read_logs([os.path.join(HERE, name)])
    info, comms, pairs = summary(acc), comm_rows(acc), pair_rows(acc)
    return info, comms, pairs, {i["id"]: i["verdict"] for i in engine_items(info, comms, pairs)}


def test_redacted_host_is_still_read():
    # NVIDIA/nccl#952: hostnames replaced by '<cluster_name>'; 27 of 27 lines are NCCL INFO lines; the
    # thread's point: 'NET/IB : No device found', two nodes joined over sockets
    info, comms, pairs, got = _read("issue952_16rank_2node_socket_redacted-host.log")
    assert info["nccl_lines"] == 27 and info["hosts"] == ["<cluster_name>"]
    assert {p["transport"] for p in pairs} == {"P2P/IPC/read", "NET/Socket/3"}
    assert [c["nranks"] for c in comms if c["comm"] == "0xf03f81dc1a49efab"] == [16]
    assert got["N1"] == "PASS" and got["N2"] == "FAIL"


def test_redacted_pid_and_comm_lines_without_init_make_one_communicator():
    # NVIDIA/nccl#1466: 'pod-id:num:num'; grep 'nRanks 4 nNodes 1' gives ranks 3, 2, 0, 1 of one communicator
    info, comms, _, _ = _read("issue1466_4gpu_1node_redacted-pid.log")
    assert info["nccl_lines"] == 16
    assert [(c["nranks"], c["nnodes"], c["ranks_seen"]) for c in comms] == [(4, 1, 4)]
    assert info["nvls"]["not_available_on"] == 4


def test_lines_without_any_prefix_are_read_and_no_host_is_invented():
    # NVIDIA/nccl#527: EC2 instances over EFA (ranks 0 and 8 on two of them); the paste kept 'NCCL INFO ...' only
    info, comms, pairs, got = _read("issue527_ec2_efa_no-prefix.log")
    assert info["nccl_lines"] == 19 and info["lines_without_host"] == 19 and info["hosts"] == []
    assert {p["transport"] for p in pairs} == {"NET/AWS Libfabric/0/GDRDMA", "P2P/IPC/read"}
    # Init COMPLETE of ranks 8, 9, 0 of 16 (NCCL before 2.16 prints no commId): one communicator
    assert [(c["nranks"], c["ranks_seen"]) for c in comms if c["nranks"]] == [(16, 3)]
    assert got["N1"] == "PASS" and got["N2"] == "PASS"


def test_unprefixed_old_shm_pair_and_warning():
    # NVIDIA/nccl#1190: 2x RTX 2080 Ti, 'via direct shared memory' (NCCL 2.12 and before), no override
    info, comms, pairs, got = _read("issue1190_2080tix2_shm_no-prefix.log")
    assert {p["transport_class"] for p in pairs} == {"SHM"} and sorted(info["networks"]) == ["Socket"]
    assert got["N1"] == "WARN"         # shm_platform in thresholds.toml
    assert info["warnings"][0].endswith("NCCL WARN Failed to open libibverbs.so[.1]")


def test_bare_version_line_is_the_nccl_version():
    # NVIDIA/nccl#1121: rank 0 prints 'NCCL version 2.18.5+cuda11.8' with no prefix (NCCL's VERSION line)
    info, _, _, _ = _read("issue1121_a6000x8_deepspeed_bare-version.log")
    assert info["nccl_version"] == ["2.18.5"] and info["cuda_version"] == ["11.8"]
    assert info["hosts"] == ["ps-SYS-420GP-TNR"] and info["ib_no_device_on"] == ["ps-SYS-420GP-TNR"]


def test_p2p_refusal_without_channel_lines_still_decides_n1():
    # NVIDIA/TensorRT-LLM#2225: 8x RTX 4090, 'P2P is disabled between connected GPUs a and b' 8 times
    info, _, pairs, got = _read("issue2225_trtllm_4090x8_p2p-disabled.log")
    assert pairs == [] and len(info["p2p_refused"]) == 8
    assert got["N1"] == "WARN"


def test_a_fragment_without_network_or_nvls_counts_gets_no_pass():
    # NVIDIA/nccl#1453: 24 ranks on 3 H100 nodes, mpirun's '[0] ' tag; the paste holds no network and
    # no nvls channel count: neither N2 nor N3 may pass on it
    info, comms, _, got = _read("issue1453_h100x24_3node_nvls_mpirun-tag.log")
    assert [(c["nranks"], c["nnodes"]) for c in comms] == [(24, 3)]
    assert info["env_overrides"] == {"NCCL_CROSS_NIC": ["2"]}
    assert got["N2"] == "INFO" and got["N3"] == "INFO"


@pytest.mark.parametrize("name,transport,n", [
    ("issue889_cloudwatch-prefix_p2p-cumem.log", "P2P/CUMEM/read", 10),     # aws/aws-ofi-nccl#889
    ("issue892_h800x8_1proc_p2p-direct.log", "P2P/direct pointer", 2),      # NVIDIA/nccl#892
])
def test_other_prefixes_keep_their_channel_lines(name, transport, n):
    _, _, pairs, got = _read(name)
    assert {p["transport"] for p in pairs} == {transport} and sum(p["channels"] for p in pairs) == n
    assert got["N1"] == "PASS"


def test_ray_timestamped_cuda_failure_is_a_warning():
    # NVIDIA/nccl#1283: Ray's '(train_rft pid=..)' and a timestamp before NCCL's prefix
    info, _, _, got = _read("issue1283_ray-timestamp_cuda-failure-warn.log")
    assert info["nccl_lines"] == 8 and got["N6"] == "WARN"
    assert "Cuda failure 1 'invalid argument'" in info["warnings"][0]


def test_shm_between_sxm_gpus_and_the_plain_set_to_override():
    # NVIDIA/nccl-tests#228: 8x A100-SXM4-80GB (the thread's nvidia-smi), every pair printed via
    # SHM/direct/direct; NCCL_IB_HCA is printed 'set to', not 'set by environment to'
    info, comms, pairs, got = _read("issue228_a100x8-sxm_shm-on-nvswitch.log")
    assert {p["transport"] for p in pairs} == {"SHM/direct/direct"} and len(pairs) == 7
    assert info["env_overrides"]["NCCL_IB_HCA"] == ["mlx5_2:1,mlx5_0:1"]
    assert got["N1"] == "WARN"
    n1 = [i for i in engine_items(info, comms, pairs) if i["id"] == "N1"][0]
    assert "fabric manager" in n1["evidence"]


def test_nvls_setup_failure_is_an_nvls_finding_not_only_a_warning():
    # NVIDIA/nccl#1705: an H100 box, '[2025-05-10 23:09:41] ' timestamps (NCCL 2.26 on), four
    # 'transport/nvls.cc:254 NCCL WARN Cuda failure 1' lines; the thread points at the NVSwitch fabric
    info, _, _, got = _read("issue1705_h100x8_nvls-cuda-failure_timestamps.log")
    assert len(info["nvls_setup_failed"]) == 4 and got["N3"] == "WARN" and got["N6"] == "WARN"
    assert "transport/nvls.cc:254 NCCL WARN" in info["warnings"][0]


def test_a_missing_verbs_library_is_not_a_warning_to_send_the_vendor():
    # NVIDIA/nccl#1190: 'misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]' twice on a 2-GPU
    # box with no InfiniBand: NCCL 2.19 on prints the same at INFO; N6 must not WARN on it alone
    info, _, _, got = _read("issue1190_2080tix2_shm_no-prefix.log")
    assert len(info["warnings"]) == 2 and got["N6"] == "INFO"


def test_net_channel_lines_without_a_node_count_still_judge_the_network():
    # deepseek-ai/DeepEP#143: H200 nodes, ranks 0-15; the paste's network lines are 'via NET/IB/8' and
    # 'NET/IB/4' with no GDRDMA, and no communicator line: N2 must still say no GPUDirect RDMA
    info, _, pairs, got = _read("issue-deepep143_h200x16_ib-no-gdrdma.log")
    assert {p["transport_class"] for p in pairs} == {"P2P", "NET/IB"}
    assert got["N1"] == "PASS" and got["N2"] == "WARN"      # net_without_gdr in thresholds.toml


def test_gb200_fabric_lines_name_the_multi_node_nvlink_domain():
    # NVIDIA/nccl#1769: 4 GPUs of a GB200 tray ('gb200a-04'); NCCL's per-GPU fabric line (src/init.cc) gives a
    # cluster UUID, clique 0x7ffe, state 3, healthMask 0xaa; they were not read before
    info, _, _, _ = _read("issue1769_gb200x4_mnnvl-fabric.log")
    fab = info["nvlink_fabric"]
    assert (fab["gpus"], fab["multi_node_domain_gpus"], fab["multi_node_domain_hosts"]) == (4, 4, 1)
    assert fab["cliques"] == ["0x7ffe"] and fab["health_masks"] == ["0xaa"] and fab["states"] == ["3"]
    assert info["env_overrides"]["NCCL_NVLS_ENABLE"] == ["1"]


def test_an_hgx_box_fabric_is_not_a_multi_node_domain():
    # deepseek-ai/DeepEP#143 (same comment): H200 GPUs print 'fabric UUID 0.0 cliqueId 0x0 state 3': an
    # NVSwitch box, no multi-node domain, so no N7 (whose written test is below)
    info, _, _, got = _read("issue-deepep143_h200x16_ib-no-gdrdma.log")
    assert info["nvlink_fabric"]["multi_node_domain_gpus"] == 0 and "N7" not in got


def _written_rack(tmp_path, mnnvl, cumem):
    """Two hosts of one NVLink domain, written from NCCL's format strings (src/init.cc, src/misc/param.cc):
    consistency with the reader, not truth (no real GB200 log with MNNVL 0 is at hand)."""
    lines = []
    for h, host in enumerate(("rack-a", "rack-b")):
        for d in range(2):
            r = 2 * h + d
            p = f"{host}:{100 + d}:{200 + d} [{d}] NCCL INFO"
            if cumem is not None:
                lines.append(f"{p} NCCL_CUMEM_ENABLE set by environment to {cumem}.")
            lines.append(f"{p} MNNVL busId 0x{d + 8}01000 fabric UUID 3143b15bc2cd192b.28cc9b5473fb5b93 "
                         "cliqueId 0x7ffe state 3 healthMask 0x0")
            lines.append(f"{p} comm 0x55{r}0 rank {r} nRanks 4 nNodes 2 localRanks 2 localRank {d} MNNVL {mnnvl}")
    path = tmp_path / "rack.log"
    path.write_text("\n".join(lines) + "\n")
    acc = read_logs([str(path)])
    info, comms, pairs = summary(acc), comm_rows(acc), pair_rows(acc)
    return {i["id"]: i for i in engine_items(info, comms, pairs)}


def test_n7_warns_when_hosts_of_one_nvlink_domain_do_not_use_it(tmp_path):
    off = _written_rack(tmp_path, 0, 0)
    assert off["N7"]["verdict"] == "WARN" and "NCCL_CUMEM_ENABLE=0" in off["N7"]["evidence"]
    assert _written_rack(tmp_path, 1, None)["N7"]["verdict"] == "PASS"


def test_a_timestamp_is_never_taken_for_a_host(tmp_path):
    # a paste that kept a timestamp and dropped NCCL's prefix: '14:10:52' is not host:pid:tid
    p = tmp_path / "t.log"
    p.write_text("2024-05-11 14:10:52 NCCL INFO Using network Socket\n"
                 "[2021-10-09 14:25:46.76831][2898439:2898470][0] NCCL INFO Connected all rings\n")
    info = summary(read_logs([str(p)]))
    assert info["nccl_lines"] == 2 and info["hosts"] == [] and info["lines_without_host"] == 2


def test_the_libfabric_provider_aws_ofi_nccl_selected_is_read():
    # aws/aws-ofi-nccl#803: p4d in docker, 'NET/OFI Selected Provider is tcp (found 1 nics)' (no EFA device in
    # the container); NVIDIA/nccl#1597: H200 instances, 'Selected Provider is efa (found 16 nics)'
    info, _, _, _ = _read("issue-awsofi803_p4d-docker_ofi-tcp-provider.log")
    assert info["ofi_providers"] == {"tcp": {"6f2d8a82d208": 1}} and info["nccl_version"] == ["2.23.4"]
    info, _, _, _ = _read("issue1597_h200x2node_efa-provider.log")
    assert info["ofi_providers"] == {"efa": {"8h200-3": 16}} and sorted(info["networks"]) == ["Libfabric"]


def _written_two_nodes(tmp_path, provider):
    """Two nodes over Libfabric, written from NCCL's and aws-ofi-nccl's format strings: consistency with
    the reader, not truth (the real pastes above stop before their communicator lines)."""
    lines = []
    for h, host in enumerate(("node-a", "node-b")):
        p = f"{host}:10:11 [0] NCCL INFO"
        lines += [f"{p} NET/OFI Selected Provider is {provider} (found 1 nics)", f"{p} Using network Libfabric",
                  f"{p} comm 0x5{h} rank {h} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
                  f"{p} Channel 00/0 : {1 - h}[0] -> {h}[0] [receive] via NET/Libfabric/0"]
    path = tmp_path / f"{provider}.log"
    path.write_text("\n".join(lines) + "\n")
    acc = read_logs([str(path)])
    info, comms, pairs = summary(acc), comm_rows(acc), pair_rows(acc)
    return {i["id"]: i for i in engine_items(info, comms, pairs)}


def test_libfabric_over_the_tcp_provider_is_nodes_over_tcp(tmp_path):
    tcp = _written_two_nodes(tmp_path, "tcp")["N2"]
    assert tcp["verdict"] == "FAIL" and "Selected Provider is tcp" in tcp["evidence"]
    assert _written_two_nodes(tmp_path, "efa")["N2"]["verdict"] == "WARN"     # EFA, but no GDRDMA printed
