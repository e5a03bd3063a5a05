"""NCCL's own account of a box, from its ``NCCL_DEBUG=INFO`` lines (``commprof import nccl-debug``).

NCCL prints, for every communicator it builds, what it found and chose. The formats read here are
those NCCL itself prints, checked against its format strings (NVIDIA/nccl ``src/debug.cc``,
``src/init.cc``, ``src/mnnvl.cc``, ``src/transport/{p2p,shm,net,coll_net,nvls,generic}.cc``,
``src/graph/{paths,search}.cc``, ``src/misc/param.cc``) at every release tag from v2.12.12-1 to
v2.30.7-1 (the regexes below name the changes):

- the line prefix ``host:pid:tid [cudaDev] NCCL INFO ...`` and ``host:pid:tid [cudaDev] file.cc:N
  [(function) ]NCCL WARN ...`` (anything before it, a timestamp, a Ray ``(RayWorkerWrapper pid=..)``,
  a torchrun ``[rank3]:`` or an srun ``0:``, is skipped; ANSI colour codes and Ray's ``[repeated Nx
  across cluster]`` suffix are removed, the latter counted);
- ``NCCL version 2.27.5+cuda12.9``; ``NCCL_P2P_DISABLE set by environment to 1``;
  ``Using network IB|Socket|Libfabric|AWS Libfabric|...``;
- the Init lines, every shape from 2.12 on: ``[[Rank R] ][ncclCommInitRank|..|ncclCommSplit ]comm 0x..
  rank R nranks N cudaDev D [nvmlDev M ]busId B [parent P [splitCount|childCount S ]color C key K]
  [commId 0x..] - Init START|COMPLETE`` (a split child without commId is keyed by its parent's key,
  split count and color, so its ranks meet in one communicator);
- ``comm 0x.. rank R nRanks N nNodes K localRanks L localRank l MNNVL m`` (2.20 on) and
  ``MNNVL m cliqueId X cliqueSize S cliqueRank r``;
- ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`` (the token to the end of the line: ``P2P/direct
  pointer``, ``NET/IB/0(5)/GDRDMA(PCI)/Shared``; ``[send]``/``[receive]`` on network channels) and
  ``CollNet 00/0 : R [send] via COLLNET/..``;
- ``2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, ...``; ``NVLS comm 0x..
  headRank H nHeads N ...``; ``Connected all rings[, use ring PXN p GDR g]``, ``Connected all trees``,
  ``Connected NVLS tree``;
- ``NVLS multicast support is (not) available on dev N``; graph lines ``Pattern 4, ..., type NVL/PIX``;
- ``P2P is disabled between connected GPUs a and b`` and ``Could not enable P2P between dev a(=..)
  and dev b(=..)``: the platform refusing P2P.

The engine's own lines beside them: vLLM's ``vLLM is using nccl==X``, ``Custom allreduce is
disabled because ...``, ``Using ['CUSTOM', 'PYNCCL'] all-reduce backends``, and its TP/PP sizes.

The file is read as a stream (bounded memory whatever its size); a file with no NCCL line is not
an error of the reader but an answer: the account says so (``nccl_lines`` 0), and the import exits
non-zero with that one line.
"""
from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from commprof.model.errors import UsageError
from commprof import results
from commprof.analysis.ncclverdict import engine_items
from commprof.model.fileio import open_user_file, shown_path
from commprof.results.nccldebug import write_nccl_tables

#: the longest line kept (NCCL's lines are short; an engine's config dump may be long)
MAX_LINE = 1 << 16
#: a file whose first bytes hold this many NULs, or undecodable bytes, is not a text log
SNIFF = 64 << 10

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_REPEATED = re.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")
#: the line prefix NCCL's logger writes (src/debug.cc): ``host:pid:tid [cudaDev] NCCL INFO msg``, and for a
#: warning ``host:pid:tid [cudaDev] file.cc:LINE NCCL WARN msg`` (2.2x and earlier) or ``... file.cc:LINE
#: (function) NCCL WARN msg`` (2.30): the source location sits between the device and the level
_NCCL = re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:(?P<loc>\S+:\d+) (?:\([^)]*\) )?)?"
                   r"NCCL (?P<lvl>INFO|WARN|ERROR) (?P<msg>.*)")
#: the same line where a paste lost or redacted the prefix's parts (NVIDIA/nccl issues #952 ``<cluster_name>:919:1150
#: [0]``, #1466 ``pod-id:num:num [3]``) or all of it (#527, #1190: ``NCCL INFO Channel 00 : ...``, ``misc/ibvwrap.cc:63
#: NCCL WARN ..``): tried only where the strict prefix does not match, at the start of what is left after a tag
#: (``[0] ``, a timestamp, ``| ``); a host of digits only is a timestamp's ``14:10:52``, never ``host:pid:tid``
_NCCL_LOOSE = re.compile(r"(?:^|[\s|\]])(?:(?![\d.]+:)(?P<host>[^\s:\[\]|]+):(?P<pid>[^\s:]+):(?P<tid>[^\s:\[]+) )?"
                         r"(?:\[(?P<dev>\d+)\] )?(?:(?P<loc>[\w./\-]+\.(?:cc|h|cu|cpp):\d+) (?:\([^)]*\) )?)?"
                         r"NCCL (?P<lvl>INFO|WARN|ERROR) (?P<msg>.*)")
#: NCCL_DEBUG's VERSION level line (src/init.cc showVersion through src/debug.cc): no prefix at all, printed
#: by rank 0 (under Ray each worker's copy carries its ``(RayWorkerWrapper pid=..)`` tag)
_BARE_VERSION = re.compile(r"(?:^|[\s)\]])NCCL version (?P<v>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?\s*$")
#: the host a line without one is filed under; never counted as a host of the box
NO_HOST = "(no host in the line)"
_VERSION = re.compile(r"^NCCL version (?P<v>[\w.]+)(?:\+cuda(?P<cuda>[\d.]+))?")
#: ``set by environment to`` (src/misc/param.cc, ncclGetEnv) and the plain ``set to`` that src/transport/net_ib.cc
#: prints for NCCL_IB_HCA (``NCCL_IB_HCA set to mlx5_2:1,mlx5_0:1``, NVIDIA/nccl-tests#228)
_ENV = re.compile(r"^(?P<name>NCCL_\w+) set (?:by environment )?to (?P<value>.*?)\.?$")
#: the network plugin's name may hold a space (aws-ofi-nccl up to 1.11 calls itself "AWS Libfabric")
_NETWORK = re.compile(r"^Using network (?P<net>.+?)\s*$")
#: the Init lines of src/init.cc, every shape from 2.12 to 2.30 (NVIDIA/nccl tags v2.12.12-1 .. v2.30.7-1):
#: ``comm P rank R nranks N cudaDev D busId B - Init COMPLETE`` (to 2.15), ``... busId B commId 0xI - Init
#: COMPLETE`` (2.16-2.18.1), ``... cudaDev D nvmlDev M busId B commId 0xI - Init START|COMPLETE`` (2.18.3-2.20),
#: the same led by ``ncclCommInitRank`` or ``ncclCommSplit ... parent P color C key K commId 0xI`` (2.21-2.22),
#: by the calling function's name (ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitAll,
#: ncclCommInitRankScalable, ncclCommSplit, ncclCommShrink, ncclCommGrow; 2.23 on) with a split child's
#: ``parent P [splitCount|childCount S] color C key K`` and no commId, and from 2.29 the START line led by
#: ``[Rank R] ``
_INIT = re.compile(r"^(?:\[Rank \d+\] )?(?:(?P<func>ncclComm\w+) )?comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) "
                   r"nranks (?P<n>\d+) cudaDev (?P<cuda>\d+)(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)"
                   r"(?: parent (?P<parent>0x[0-9a-f]+|\(nil\))(?: (?:splitCount|childCount) (?P<split>\d+))?"
                   r" color (?P<color>-?\d+) key (?P<key>-?\d+))?"
                   r"(?: commId (?P<id>0x[0-9a-f]+))?\s*(?:- Init (?P<state>START|COMPLETE))?")
_COMM = re.compile(r"^comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<n>\d+) nNodes (?P<nodes>\d+) localRanks "
                   r"(?P<local>\d+) localRank (?P<lr>\d+)(?: MNNVL (?P<mnnvl>\d+))?")
#: src/transport/{p2p,shm,net}.cc: the transport token runs to the end of the line and may hold spaces
#: (``P2P/direct pointer/read``, ``NET/AWS Libfabric/0/GDRDMA``); SHM lines have no ``/connIndex``
_CHANNEL = re.compile(r"^Channel (?P<ch>\d+)(?:/(?P<sub>\d+))? : (?P<src>\d+)\[(?P<sdev>[\w]+)\] -> (?P<dst>\d+)\[(?P<ddev>[\w]+)\]"
                      r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$")
#: the token itself: one word, save the three NCCL prints with a space (a network plugin's name,
#: ``direct pointer``, ``direct shared memory``); text another process wrote into the same line is cut off
_VIA = re.compile(r"(?:NET/[^/]+/\d+|COLLNET/[^/]+/\d+|P2P/direct pointer|direct shared memory|\S+)\S*")
#: src/transport/coll_net.cc (2.1x-2.30): ``CollNet CC/I : R [send|receive] via COLLNET/<name>/<dev>...``
_COLLNET = re.compile(r"^CollNet (?P<ch>\d+)/(?P<sub>\d+) : (?P<rank>\d+) \[(?P<dir>send|receive)\] via (?P<via>COLLNET/.+?)\s*$")
#: src/transport/nvls.cc: a communicator that sets NVLS buffers up prints ``NVLS comm P headRank H nHeads N ...``
_NVLS_COMM = re.compile(r"^NVLS comm (?P<comm>0x[0-9a-f]+) headRank (?P<head>-?\d+) nHeads (?P<heads>\d+)")
#: src/transport/generic.cc, nvls.cc, coll_net.cc: what a communicator connected
_CONNECTED = re.compile(r"^(?:rank \d+ )?Connected (?P<what>all rings|all trees|NVLS tree|binomial trees|CollNet|Collnet Chains)"
                        r"(?:, use ring PXN (?P<pxn>\d+) GDR (?P<gdr>\d+))?")
#: src/init.cc (2.21-2.24) and src/mnnvl.cc (2.25 on): ``MNNVL m cliqueId X cliqueSize S cliqueRank R [nvlDomainSize D]``
_MNNVL = re.compile(r"^MNNVL (?P<m>\d+) cliqueId (?P<id>(?:0x)?[0-9a-f]+) cliqueSize (?P<size>\d+) cliqueRank (?P<crank>\d+)")
#: src/transport/net_ib.cc (net_ib/init.cc in 2.28 on), the same from 2.18 to 2.30: ``NET/IB : Using [0]mlx5_0:1/IB
#: [1]mlx5_1:1/RoCE [RO]; OOB eth0:..`` (no device listed when it found none) or ``NET/IB : No device found.``
#: src/init.cc (2.20 on): each GPU attached to an NVLink fabric (fabric state not NOT_SUPPORTED) prints
#: ``MNNVL busId 0x.. fabric UUID %lx.%lx cliqueId 0x.. state S healthMask 0x..``: UUID ``0.0`` on a single
#: NVSwitch box (HGX H100/H200), a real cluster UUID on a multi-node NVLink domain (a GB200 NVL72 rack)
_FABRIC = re.compile(r"^MNNVL busId (?P<bus>0x[0-9a-f]+) fabric UUID (?P<uuid>[0-9a-f\-]+\.[0-9a-f\-]+) "
                     r"cliqueId (?P<clique>0x[0-9a-f]+) state (?P<state>\d+) healthMask (?P<health>0x[0-9a-f]+)")
_IB_USING = re.compile(r"^NET/IB : Using(?P<devs>(?: \[\d+\][^\s\[;]+)*)")
#: aws-ofi-nccl (the Libfabric net plugin, ``NET/OFI`` lines): ``NET/OFI Selected Provider is efa (found 16 nics)``;
#: a ``tcp`` (or ``sockets``) provider means Libfabric runs over TCP: no EFA device reached the process
_OFI_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is (?P<prov>[\w;+\-]+)(?:[, ]+\(?found (?P<n>\d+) nics?)?")
_IB_NONE = re.compile(r"^NET/IB : No device found")
#: src/graph/paths.cc and src/transport/p2p.cc: the platform (driver, NVML, PCIe ACS) refusing P2P
_P2P_REFUSED = re.compile(r"^(?:P2P is disabled between (?:NVLINK )?connected GPUs (?P<a>\d+) and (?P<b>\d+)"
                          r"|Could not enable P2P between dev (?P<c>\d+)\(=[0-9a-f]+\) and dev (?P<d>\d+)"
                          r"|peer query failed between dev (?P<e>\d+)\(=[0-9a-f]+\) and dev (?P<f>\d+))")
_CHANNELS = re.compile(r"(\d+) (coll|collnet|nvls|p2p) channels(?!\s+per)")
_NVLS = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\d+)")
_PATTERN = re.compile(r"Pattern \d+, crossNic \d+, nChannels \d+, bw [\d.]+/[\d.]+, type (?P<intra>[A-Z0-9]+)/(?P<inter>[A-Z0-9]+)")
_VLLM_NCCL = re.compile(r"vLLM is using nccl==(?P<v>[\w.]+)")
_CUSTOM_OFF = re.compile(r"Custom allreduce is disabled because (?P<why>.+?)(?:\. To silence| To silence|$)")
_AR_BACKENDS = re.compile(r"Using \[(?P<list>[^\]]*)\] all-reduce backends")
_TP = re.compile(r"\b(?:tensor_parallel_size|tp_size)[=:]\s*(?P<n>\d+)")
_PP = re.compile(r"\b(?:pipeline_parallel_size|pp_size)[=:]\s*(?P<n>\d+)")
_ENGINE = re.compile(r"(?P<name>vLLM|SGLang|sglang)[^\n]{0,40}?\bv?(?P<v>\d+\.\d+\.\d+(?:\.post\d+)?)\b")
_V1_ENGINE = re.compile(r"LLM engine \(v(?P<v>\d+\.\d+\.\d+[\w.]*)\)")
#: a line the engine regexes below can match holds one of these (lower-cased): the cheap test that keeps
#: a log of mostly other lines from paying ten regex searches a line
_ENGINE_WORDS = ("nccl", "custom", "all-reduce", "_size", "vllm", "sglang", "llm engine")
_DISABLE_CUSTOM_FLAG = re.compile(r"disable[_-]custom[_-]all[_-]reduce['\"]?\s*[:=]\s*True", re.I)


def transport_class(via: str) -> str:
    """The transport family of a ``via`` token: P2P, SHM, NET/IB, NET/Socket, NET/<plugin>,
    CollNet, NVLS, or the token itself."""
    parts = via.split("/")
    head = parts[0]
    if via.startswith(_OLD_SHM):
        return "SHM"
    if head == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}"
    if head in ("P2P", "SHM"):
        return head
    if head.upper().startswith("COLLNET"):
        return "CollNet"
    if head.upper().startswith("NVLS"):
        return "NVLS"
    return via


#: src/transport/shm.cc up to NCCL 2.12 (v2.12.12-1) named SHM so; 2.13 on prints ``SHM/<send>/<recv>``
_OLD_SHM = "direct shared memory"
_KNOWN_HEADS = ("P2P", "SHM", "NET", "COLLNET", "NVLS", _OLD_SHM.upper())


def transport_label(via: str) -> str:
    """A ``via`` token without its channel-specific parts: NET/IB/3/GDRDMA -> NET/IB/GDRDMA (the
    NIC index, a PXN proxy rank ``3(5)``, ``(PCI)`` and ``/Shared`` dropped), P2P/IPC/read -> P2P/IPC,
    SHM/direct/direct -> SHM."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}" + ("/GDRDMA" if any(p.startswith("GDRDMA") for p in parts[2:]) else "")
    if parts[0] == "P2P":
        return "/".join(parts[:2])
    if parts[0] == "SHM" or via.startswith(_OLD_SHM):
        return "SHM"
    return via


UNATTRIBUTED = "(unattributed)"


def _fits(comm, top: int, via: str) -> bool:
    """Whether a channel line can belong to ``comm``: its ranks exist there, a comm on one node
    has no network channel, and one with a node per rank has no P2P or SHM channel."""
    if comm.nranks and top >= comm.nranks:
        return False
    if comm.nnodes == 1 and via.startswith("NET"):
        return False
    if comm.nnodes and comm.nranks and comm.nnodes == comm.nranks and via.startswith(("P2P", "SHM", _OLD_SHM)):
        return False
    return True


@dataclass
class Comm:
    """One communicator, as the ranks that printed it saw it."""
    key: str                              # commId where printed, else the first rank's comm pointer
    nranks: int | None = None
    nnodes: int | None = None
    local_ranks: set = field(default_factory=set)
    mnnvl: int | None = None
    ranks: set = field(default_factory=set)
    hosts: set = field(default_factory=set)
    channels: dict = field(default_factory=dict)        # (channel, src, dst, dir) -> via
    counts: dict = field(default_factory=dict)          # coll/collnet/nvls/p2p -> channels
    complete: int = 0
    funcs: set = field(default_factory=set)             # the Init lines' function (ncclCommInitRank, ncclCommSplit, ..)
    clique_size: int | None = None                      # MNNVL clique (the GPUs one NVLink domain joins)
    nvls_heads: int | None = None                       # NVLS buffers set up ("NVLS comm .. nHeads N")
    collnet: set = field(default_factory=set)           # (channel, rank, direction) of its CollNet lines
    connected: set = field(default_factory=set)         # what it connected: rings, trees, NVLS tree, CollNet
    ring_gdr: set = field(default_factory=set)          # "Connected all rings, use ring PXN p GDR g": (p, g)
    unkeyed: bool = False                               # no commId printed: its ranks joined by shape (_unkeyed)


@dataclass
class Account:
    """What one or more NCCL_DEBUG logs say of the box and of the engine."""
    files: list = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0
    warn_lines: list = field(default_factory=list)
    truncated_lines: int = 0              # channel lines cut before their transport
    fabric: dict = field(default_factory=dict)           # (host, busId) -> (fabric UUID, cliqueId, state, healthMask)
    nvls_failed: list = field(default_factory=list)      # NCCL WARN lines of src/transport/nvls.cc: NVLS setup failed
    unprefixed_lines: int = 0             # NCCL lines without NCCL's host:pid:tid prefix (a paste that dropped it)
    repeated_lines: int = 0               # Ray folded this many more lines into "[repeated Nx]" suffixes
    versions: Counter = field(default_factory=Counter)
    cuda_versions: Counter = field(default_factory=Counter)
    env: dict = field(default_factory=dict)             # NCCL_* -> values seen
    networks: dict = field(default_factory=dict)        # network -> hosts
    nvls_available: set = field(default_factory=set)    # (host, dev)
    nvls_unavailable: set = field(default_factory=set)
    graph_types: Counter = field(default_factory=Counter)   # intra-node path type of the graphs (NVL, PIX, ...)
    comms: dict = field(default_factory=dict)
    hosts: set = field(default_factory=set)
    engine: dict = field(default_factory=dict)
    host_lines: Counter = field(default_factory=Counter)    # host -> NCCL lines it printed
    host_bus: dict = field(default_factory=dict)            # host -> busIds of its Init lines
    host_devs: dict = field(default_factory=dict)           # host -> the cudaDev of its line prefixes
    host_pids: dict = field(default_factory=dict)           # host -> the pids of its line prefixes
    p2p_refused: list = field(default_factory=list)         # NCCL's own lines saying the platform refused P2P
    ofi_providers: dict = field(default_factory=dict)       # aws-ofi-nccl's libfabric provider -> {host: NICs found}
    rdma_nics: dict = field(default_factory=dict)           # host -> the RDMA devices NCCL's IB transport listed
    ib_no_device: set = field(default_factory=set)          # hosts where NCCL's IB transport found no device


def _lines(path: str):
    """A log's lines as text, read as they come (bounded memory); UsageError on a binary file."""
    if not os.path.lexists(path):
        raise UsageError(f"'{path}': no such file")
    # a FIFO or a device is refused before it is opened (opening a FIFO waits for a writer)
    f = open_user_file(path, f"'{path}'", ": a directory; give the log files")
    with f:
        head = f.read(SNIFF)
        if b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise UsageError(f"'{path}': a binary file, not an NCCL_DEBUG log (text)")
        f.seek(0)
        while True:
            raw = f.readline(MAX_LINE)          # a line is never held whole past MAX_LINE bytes
            if not raw:
                return
            if len(raw) == MAX_LINE and not raw.endswith(b"\n"):
                while True:                     # the rest of an over-long line is skipped, not kept
                    more = f.readline(MAX_LINE)
                    if not more or more.endswith(b"\n"):
                        break
            yield raw.decode("utf-8", errors="replace")


def _thread_key(m) -> tuple:
    return m.group("host") or NO_HOST, m.group("pid") or "", m.group("tid") or ""


def read_logs(paths: list[str]) -> Account:
    """The account of every NCCL_DEBUG line in ``paths`` (several ranks' logs, interleaved or not)."""
    acc = Account()
    by_pointer: dict = {}          # (host, pid, comm pointer) -> Comm
    current: dict = {}             # (host, pid, tid) -> Comm: the comm a thread is building
    current[("last",)] = {}        # (host, pid) -> the comm that process touched last
    for path in paths:
        acc.files.append(path)
        for raw in _lines(path):
            acc.lines += 1
            line = _ANSI.sub("", raw.rstrip("\r\n"))
            rep = _REPEATED.search(line)
            if rep:
                acc.repeated_lines += int(rep.group(1))
                line = line[:rep.start()]
            low = line.lower()
            if any(k in low for k in _ENGINE_WORDS):     # the engine's regexes only on lines that can match
                _engine_line(acc, line)
            if "NCCL" not in line:         # a plain test first: 1 GB of others' lines
                continue
            m = _NCCL.search(line) or _NCCL_LOOSE.search(line)
            if not m:
                if (bv := _BARE_VERSION.search(line)):
                    acc.versions[bv.group("v")] += 1
                    if bv.group("cuda"):
                        acc.cuda_versions[bv.group("cuda")] += 1
                continue
            acc.nccl_lines += 1
            host, msg = m.group("host"), m.group("msg").strip()
            if host is None:
                acc.unprefixed_lines += 1
                host = NO_HOST
            else:
                acc.hosts.add(host)
                acc.host_lines[host] += 1
                acc.host_pids.setdefault(host, set()).add(m.group("pid"))
                if m.group("dev") is not None:
                    acc.host_devs.setdefault(host, set()).add(int(m.group("dev")))
            if m.group("lvl") != "INFO":
                if len(acc.warn_lines) < 20:
                    dev = f" [{m.group('dev')}]" if m.group("dev") is not None else ""
                    loc = f" {m.group('loc')}" if m.group("loc") else ""
                    acc.warn_lines.append(f"{host}{dev}{loc} NCCL {m.group('lvl')} {msg}"[:300])
                if (m.group("loc") or "").startswith("transport/nvls.cc") and len(acc.nvls_failed) < 20:
                    acc.nvls_failed.append(f"{host} {m.group('loc')}: {msg}"[:200])
                continue
            _nccl_line(acc, m, host, msg, by_pointer, current)
    return acc


def _engine_line(acc: Account, line: str) -> None:
    e = acc.engine
    v = _VLLM_NCCL.search(line)
    if v:
        e.setdefault("engine", "vLLM")
        e["engine_nccl_version"] = v.group("v")
    c = _CUSTOM_OFF.search(line)
    if c:
        e["custom_all_reduce"] = "off"
        e["custom_all_reduce_why"] = c.group("why").strip().rstrip(".")
    b = _AR_BACKENDS.search(line)
    if b:
        names = [x.strip().strip("'\"") for x in b.group("list").split(",") if x.strip()]
        e["all_reduce_backends"] = names
        if "custom_all_reduce_why" not in e:
            e["custom_all_reduce"] = "on" if "CUSTOM" in names else "off"
            if "CUSTOM" not in names:
                e["custom_all_reduce_why"] = "not among the engine's all-reduce backends"
    if _DISABLE_CUSTOM_FLAG.search(line) and "To silence" not in line:
        e["custom_all_reduce"] = "off"
        e["custom_all_reduce_why"] = "disabled by the user (disable_custom_all_reduce=True)"
    for rx, key in ((_TP, "tp_size"), (_PP, "pp_size")):
        t = rx.search(line)
        if t and key not in e:
            e[key] = int(t.group("n"))
    v1 = _V1_ENGINE.search(line)
    if v1 and "engine_version" not in e:
        e["engine"], e["engine_version"] = "vLLM", v1.group("v")
    g = _ENGINE.search(line)
    if g and "engine_version" not in e and ("engine" in line.lower() or "version" in line.lower()):
        e["engine"] = "SGLang" if g.group("name").lower() == "sglang" else "vLLM"
        e["engine_version"] = g.group("v")


def _split_key(i, host: str, pid: str, by_pointer: dict) -> str | None:
    """The key of a communicator split from another (2.23 on its Init lines carry no commId): its
    parent's key, the parent's split count and the color, the same on every rank that joined it."""
    if not i.group("parent") or i.group("color") is None:
        return None
    parent = by_pointer.get((host, pid, i.group("parent")))
    base = parent.key if parent is not None else f"{host}:{pid}:{i.group('parent')}"
    return f"{base}/split{i.group('split') or ''}/color{i.group('color')}"


def _unkeyed(acc: Account, nranks: int, nnodes: int | None, rank: int, key: str) -> Comm:
    """The communicator of a rank whose lines name no commId (NCCL 2.12-2.15's Init lines; a fragment
    holding only ``comm P rank R nRanks N nNodes K ..`` lines): each process prints its own comm
    pointer, so the ranks of one communicator are joined by shape: the latest such communicator of
    the same size (and node count, where printed) that has not seen this rank yet; a rank seen again
    starts the next one. Communicators are built one after another, so their ranks' lines come
    together."""
    for comm in reversed(list(acc.comms.values())):
        if (comm.unkeyed and comm.nranks == nranks and rank not in comm.ranks
                and (nnodes is None or comm.nnodes is None or comm.nnodes == nnodes)):
            return comm
    comm = acc.comms.setdefault(key, Comm(key=key))
    comm.unkeyed = True
    return comm


def _nccl_line(acc: Account, m, host: str, msg: str, by_pointer: dict, current: dict) -> None:
    pid, thread = m.group("pid") or "", _thread_key(m)
    if (v := _VERSION.match(msg)):
        acc.versions[v.group("v")] += 1
        if v.group("cuda"):
            acc.cuda_versions[v.group("cuda")] += 1
        return
    if (en := _ENV.match(msg)):
        acc.env.setdefault(en.group("name"), set()).add(en.group("value").strip())
        return
    if (nw := _NETWORK.match(msg)):
        acc.networks.setdefault(nw.group("net"), set()).add(host)
        return
    if (i := _INIT.match(msg)):
        ptr = (host, pid, i.group("comm"))
        comm = by_pointer.get(ptr)
        key = i.group("id") or _split_key(i, host, pid, by_pointer)
        if comm is None and key is None:   # NCCL 2.12-2.15 print no commId: the ranks met by shape
            comm = _unkeyed(acc, int(i.group("n")), None, int(i.group("rank")), f"{host}:{pid}:{i.group('comm')}")
            by_pointer[ptr] = comm
        if comm is None:
            comm = acc.comms.get(key) or Comm(key=key)
            acc.comms[key] = comm
            by_pointer[ptr] = comm
        comm.nranks = int(i.group("n"))
        comm.ranks.add(int(i.group("rank")))
        if host != NO_HOST:
            comm.hosts.add(host)
        if i.group("func"):
            comm.funcs.add(i.group("func"))
        if host != NO_HOST:
            acc.host_bus.setdefault(host, set()).add(i.group("bus").lower().lstrip("0") or "0")
        if i.group("state") == "COMPLETE":
            comm.complete += 1
        current[thread] = comm
        current[("last",)][(host, pid)] = comm
        return
    if (c := _COMM.match(msg)):
        ptr = (host, pid, c.group("comm"))
        comm = by_pointer.get(ptr)
        if comm is None:                   # a fragment without its Init line: the ranks met by shape
            comm = _unkeyed(acc, int(c.group("n")), int(c.group("nodes")), int(c.group("rank")),
                            f"{host}:{pid}:{c.group('comm')}")
            by_pointer[ptr] = comm
        comm.nranks = int(c.group("n"))
        comm.nnodes = int(c.group("nodes"))
        comm.local_ranks.add(int(c.group("local")))
        comm.ranks.add(int(c.group("rank")))
        if host != NO_HOST:
            comm.hosts.add(host)
        if c.group("mnnvl") is not None:
            comm.mnnvl = int(c.group("mnnvl"))
        current[thread] = comm
        current[("last",)][(host, pid)] = comm
        return
    if (co := _COLLNET.match(msg)):
        comm = current.get(thread) or current[("last",)].get((host, pid))
        if comm is not None:
            comm.collnet.add((int(co.group("ch")), int(co.group("rank")), co.group("dir")))
        return
    if (nc := _NVLS_COMM.match(msg)):
        comm = by_pointer.get((host, pid, nc.group("comm"))) or current.get(thread)
        if comm is not None:
            comm.nvls_heads = max(comm.nvls_heads or 0, int(nc.group("heads")))
        return
    if (cn := _CONNECTED.match(msg)):
        comm = current.get(thread) or current[("last",)].get((host, pid))
        if comm is not None:
            comm.connected.add(cn.group("what").lower())
            if cn.group("gdr") is not None:
                comm.ring_gdr.add((int(cn.group("pxn")), int(cn.group("gdr"))))
        return
    if (fb := _FABRIC.match(msg)):
        acc.fabric[(host, fb.group("bus"))] = (fb.group("uuid"), fb.group("clique"), fb.group("state"),
                                               fb.group("health"))
        return
    if (mn := _MNNVL.match(msg)):
        comm = current.get(thread) or current[("last",)].get((host, pid))
        if comm is not None:
            comm.mnnvl = int(mn.group("m"))
            comm.clique_size = int(mn.group("size"))
        return
    if msg.startswith("NET/OFI ") and (op := _OFI_PROVIDER.match(msg)):
        acc.ofi_providers.setdefault(op.group("prov"), {})[host] = int(op.group("n") or 0)
        return
    if msg.startswith("NET/IB : "):
        if (ib := _IB_USING.match(msg)):
            devs = [d.split("]", 1)[1] for d in ib.group("devs").split()]
            if devs:
                acc.rdma_nics.setdefault(host, set()).update(devs)
            else:
                acc.ib_no_device.add(host)
            return
        if _IB_NONE.match(msg):
            acc.ib_no_device.add(host)
            return
    if (pr := _P2P_REFUSED.match(msg)):
        a, b = [g for g in pr.groups() if g is not None][:2]
        if len(acc.p2p_refused) < 64:
            acc.p2p_refused.append(f"{host}: GPU {a} and GPU {b}: {msg[:120]}")
        return
    if (ch := _CHANNEL.match(msg)):
        via = _VIA.match(ch.group("via")).group(0)
        if not via.upper().startswith(_KNOWN_HEADS) or via in ("P2P", "SHM", "NET"):
            acc.truncated_lines += 1       # a line cut short (a paste, a full buffer): no transport
            return
        top = max(int(ch.group("src")), int(ch.group("dst")))
        comm = next((c for c in (current.get(thread), current[("last",)].get((host, pid)))
                     if c is not None and _fits(c, top, via)), None)
        if comm is None:                   # its comm's lines were not printed (a fragment, Ray's folding)
            comm = acc.comms.setdefault(UNATTRIBUTED, Comm(key=UNATTRIBUTED))
        comm.channels[(int(ch.group("ch")), int(ch.group("src")), int(ch.group("dst")), ch.group("dir") or "")] = via
        if host != NO_HOST:
            comm.hosts.add(host)
        return
    if "channels" in msg and (counts := _CHANNELS.findall(msg)):
        comm = current.get(thread) or current[("last",)].get((host, pid))
        if comm is not None:
            for n, kind in counts:
                comm.counts[kind] = max(comm.counts.get(kind, 0), int(n))
        return
    if (nv := _NVLS.match(msg)):
        (acc.nvls_unavailable if nv.group("not") else acc.nvls_available).add((host, nv.group("dev")))
        return
    if (p := _PATTERN.search(msg)):
        acc.graph_types[p.group("intra")] += 1


# --- the account as tables -------------------------------------------------------------------------

PAIR_COLUMNS = ["comm", "src_rank", "dst_rank", "channels", "transport", "transport_class", "direction"]
COMM_COLUMNS = ["comm", "nranks", "nnodes", "nnodes_from", "local_ranks", "mnnvl", "ranks_seen", "hosts", "pairs",
                "transports", "coll_channels", "nvls_channels", "collnet_channels", "p2p_channels",
                "init_complete", "init_func", "mnnvl_clique_size", "nvls_heads", "collnet_connections", "connected",
                "ring_pxn_gdr", "role", "summary"]


def pair_rows(acc: Account) -> list[dict]:
    """One row per communicator, rank pair and direction: the transport its channels use."""
    out = []
    for comm in acc.comms.values():
        by_pair = defaultdict(list)
        for (ch, src, dst, direction), via in comm.channels.items():
            by_pair[(src, dst, direction)].append(via)
        for (src, dst, direction), vias in sorted(by_pair.items()):
            for via, n in Counter(vias).most_common():
                out.append({"comm": comm.key, "src_rank": src, "dst_rank": dst, "channels": n, "transport": via,
                            "transport_class": transport_class(via), "direction": direction})
    return out


def _link_word(acc: Account) -> str:
    """What a P2P transport runs over, where the graph lines say (type NVL: NVLink; PIX/PXB/PHB/SYS: PCIe)."""
    kinds = set(acc.graph_types)
    if kinds and kinds <= {"NVL", "NVB"}:
        return "NVLink"
    if kinds and not kinds & {"NVL", "NVB"}:
        return "PCIe"
    return ""


def role_of(comm: Comm, engine: dict) -> str:
    tp, pp = engine.get("tp_size"), engine.get("pp_size")
    if comm.nranks and tp and comm.nranks == tp and tp > 1:
        return "TP group"
    if comm.nranks and pp and comm.nranks == pp and pp > 1:
        return "PP group"
    return "group"


def _nodes(comm: Comm, acc: Account) -> tuple:
    """A communicator's node count and where it comes from: NCCL's own ``nNodes`` (2.20 on), else,
    where every rank's Init line was seen, the distinct hostnames that printed them (NCCL 2.12-2.19
    print no node count; NCCL counts nodes by host hash, which the hostname stands for here)."""
    if comm.nnodes is not None:
        return comm.nnodes, "printed"
    if comm.key != UNATTRIBUTED and comm.nranks and len(comm.ranks) == comm.nranks and comm.hosts:
        cut = _cut_hosts(acc)
        return len({cut.get(h, h) for h in comm.hosts}), "hostnames"
    return None, ""


def comm_rows(acc: Account) -> list[dict]:
    """One row per communicator, with the line a person reads at a glance."""
    pairs = pair_rows(acc)
    link = _link_word(acc)
    out = []
    for comm in acc.comms.values():
        mine = [p for p in pairs if p["comm"] == comm.key]
        seen = {(p["src_rank"], p["dst_rank"]) for p in mine}
        by_class = Counter()
        for (s, d) in seen:
            vias = Counter(transport_label(p["transport"]) for p in mine if (p["src_rank"], p["dst_rank"]) == (s, d))
            by_class[vias.most_common(1)[0][0]] += 1
        transports = ", ".join(f"{n} {via}" for via, n in by_class.most_common())
        role = role_of(comm, acc.engine)
        n = comm.nranks or len(comm.ranks) or "?"
        nodes, nodes_from = _nodes(comm, acc)
        where = ("(its node count not printed)" if nodes is None else "on 1 node" if nodes == 1
                 else f"over {nodes} nodes")
        words = []
        for via, k in by_class.most_common():
            cls = transport_class(via)
            note = f" ({link})" if cls == "P2P" and link else ""
            words.append(f"{k} of {len(seen)} pairs printed {via}{note}")
        if comm.key == UNATTRIBUTED:
            role, where = "channel lines whose communicator's lines were not printed", ""
        summary = f"{role} of {n} {where}: " if comm.key != UNATTRIBUTED else f"{role}: "
        summary += "" + ("; ".join(words) if words else "no channel lines printed")
        if comm.mnnvl:
            summary += "; MNNVL on" + (f" (clique of {comm.clique_size} GPUs)" if comm.clique_size else "")
        if comm.nvls_heads:
            summary += f"; NVLS set up ({comm.nvls_heads} heads)"
        if comm.collnet:
            summary += f"; CollNet connected ({len(comm.collnet)} lines)"
        out.append({"comm": comm.key, "nranks": comm.nranks, "nnodes": nodes, "nnodes_from": nodes_from,
                    "local_ranks": ",".join(str(x) for x in sorted(comm.local_ranks)), "mnnvl": comm.mnnvl,
                    "ranks_seen": len(comm.ranks), "hosts": len(comm.hosts), "pairs": len(seen),
                    "transports": transports, "coll_channels": comm.counts.get("coll"),
                    "nvls_channels": comm.counts.get("nvls"), "collnet_channels": comm.counts.get("collnet"),
                    "p2p_channels": comm.counts.get("p2p"), "init_complete": comm.complete,
                    "init_func": ",".join(sorted(comm.funcs)), "mnnvl_clique_size": comm.clique_size,
                    "nvls_heads": comm.nvls_heads, "collnet_connections": len(comm.collnet) or None,
                    "connected": ",".join(sorted(comm.connected)),
                    "ring_pxn_gdr": ",".join(f"PXN {p} GDR {g}" for p, g in sorted(comm.ring_gdr)),
                    "role": role, "summary": summary})
    return out


def _cut_hosts(acc: Account) -> dict:
    """Hosts that are the tail of another host seen with more lines (``pseek-v2-5-0-1`` beside
    ``deepseek-v2-5-0-1``: a line whose start another line's output overwrote) -> that host."""
    out = {}
    for h in acc.host_lines:
        longer = [g for g in acc.host_lines if g != h and g.endswith(h) and acc.host_lines[g] > acc.host_lines[h]]
        if longer:
            out[h] = max(longer, key=lambda g: acc.host_lines[g])
    return out


def box_identity(acc: Account) -> dict:
    """What identifies the machine(s) the log was printed on, as ``check`` and ``report`` match it to
    a box: the hostnames of NCCL's line prefixes (``host:pid:tid``; NCCL cuts them at the first
    '.'), most lines first, and per host the GPUs NCCL used there: the more of the distinct busIds
    of its ``ncclCommInitRank`` lines and the distinct cudaDev of its line prefixes. Both are lower
    bounds (Ray folds repeated lines away; a process that sees one GPU calls it 0), so a count
    contradicts a box with fewer GPUs, never one with more. The largest communicator's ranks and
    nodes beside them."""
    cut = _cut_hosts(acc)
    hosts = sorted((h for h in acc.host_lines if h not in cut), key=lambda h: (-acc.host_lines[h], h))
    gpus, source, bus = {}, {}, {}
    for h in hosts:
        b = set(acc.host_bus.get(h, set()))
        devs = set(acc.host_devs.get(h, set()))
        for c, g in cut.items():
            if g == h:
                b |= acc.host_bus.get(c, set())
                devs |= acc.host_devs.get(c, set())
        gpus[h] = max(len(b), len(devs))
        source[h] = "busId" if b and len(b) >= len(devs) else "cudaDev"
        if b:
            bus[h] = sorted(b)
    comms = [c for c in acc.comms.values() if c.key != UNATTRIBUTED]
    return {"hosts": hosts, "gpus_per_host": gpus, "gpus_from": source, "bus_ids": bus,
            "pids_per_host": {h: len(acc.host_pids.get(h, ())) for h in hosts},
            "cut_hosts": dict(sorted(cut.items())),
            "nranks_max": max((c.nranks for c in comms if c.nranks), default=None),
            "nnodes_max": max((c.nnodes for c in comms if c.nnodes), default=None),
            "from": "NCCL INFO line prefixes (host:pid:tid [cudaDev]) and ncclCommInitRank busId"}


def _fabric_summary(acc: Account) -> dict:
    """The NVLink fabric NCCL's ``MNNVL busId .. fabric UUID ..`` lines report: how many GPUs are attached,
    how many of them (on how many hosts) sit in a multi-node NVLink domain (a cluster UUID other than 0.0),
    and its cliques, fabric states and health masks as printed (not judged: NVML's nvmlGpuFabricInfo_v2)."""
    multi = {k: v for k, v in acc.fabric.items() if v[0] not in ("0.0", "0-0")}
    return {"gpus": len(acc.fabric), "multi_node_domain_gpus": len(multi),
            "multi_node_domain_hosts": len({h for h, _ in multi}),
            "cliques": sorted({v[1] for v in multi.values()}), "states": sorted({v[2] for v in acc.fabric.values()}),
            "health_masks": sorted({v[3] for v in acc.fabric.values()})}


def summary(acc: Account) -> dict:
    """The account's scalars, as meta.json records them."""
    return {
        "files": len(acc.files), "lines": acc.lines, "nccl_lines": acc.nccl_lines,
        "repeated_lines_folded": acc.repeated_lines, "truncated_channel_lines": acc.truncated_lines,
        "lines_without_host": acc.unprefixed_lines, "nvlink_fabric": _fabric_summary(acc), "nvls_setup_failed": list(acc.nvls_failed),
        "nccl_version": [v for v, _ in acc.versions.most_common()],
        "cuda_version": [v for v, _ in acc.cuda_versions.most_common()],
        "env_overrides": {k: sorted(v) for k, v in sorted(acc.env.items())},
        "networks": {k: sorted(v) for k, v in sorted(acc.networks.items())},
        "hosts": sorted(acc.hosts),
        "nvls": {"available_on": len(acc.nvls_available), "not_available_on": len(acc.nvls_unavailable)},
        "graph_intra_types": dict(acc.graph_types),
        "p2p_refused": list(acc.p2p_refused),
        "rdma_nics": {h: sorted(v) for h, v in sorted(acc.rdma_nics.items())},
        "ofi_providers": {p: dict(sorted(v.items())) for p, v in sorted(acc.ofi_providers.items())},
        "rdma_link_layers": sorted({d.rsplit("/", 1)[-1] for v in acc.rdma_nics.values() for d in v if "/" in d}),
        "ib_no_device_on": sorted(acc.ib_no_device),
        "engine": dict(acc.engine),
        "warnings": list(acc.warn_lines),
    }


# --- the import ------------------------------------------------------------------------------------

def import_nccl_debug(paths: list[str], out_dir: str, expect_gpus: int | None = None,
                      expect_nodes: int | None = None, command=None) -> dict:
    """Read ``paths``, write the account into ``out_dir`` (tables then meta.json); the meta.

    UsageError (nothing written) for a file that cannot be read or is binary; a log with no NCCL
    line is written (its account says so) and ``meta['nccl_lines']`` is 0."""
    import sys

    if not paths:
        raise UsageError("import nccl-debug: give one or more log files")
    for p in paths:
        if not os.path.exists(p):
            raise UsageError(f"'{p}': no such file")
    acc = read_logs(paths)
    comms, pairs, info = comm_rows(acc), pair_rows(acc), summary(acc)
    items = engine_items(info, comms, pairs, expect_gpus=expect_gpus, expect_nodes=expect_nodes)
    os.makedirs(out_dir, exist_ok=True)
    write_nccl_tables(out_dir, COMM_COLUMNS, comms, PAIR_COLUMNS, pairs, items)
    meta = results.provenance(
        "import", "imported", "NCCL_DEBUG=INFO log(s) read as NCCL's own account of the box "
        "(commprof import nccl-debug)", status="complete",
        command=list(command) if command is not None else list(sys.argv), hosts=info["hosts"], gpus=[],
        source_files=[{"path": shown_path(p), "sha256": results.file_sha256(p)} for p in paths],
        import_kind="nccl-debug", nccl_debug=info, box_identity=box_identity(acc),
        expect={"gpus": expect_gpus, "nodes": expect_nodes},
        verdict=[{k: it[k] for k in ("id", "verdict")} for it in items])
    results.write_meta(out_dir, meta)
    return meta
