"""A stand-in for the ``pynvml`` module that answers from recorded NVML answers.

Fixtures live in ``tests/data/nvml/*.json``. Each names where its box's shape comes from
(``_source``) and records what NVML answers, keyed by the pynvml call:

* ``nvmlSystemGetDriverVersion``, ``nvmlDeviceGetCount``: one answer for the box.
* ``all_gpus``: answers shared by every GPU; ``gpus``: one dict per GPU that adds to or replaces them.
  A per-link call (``nvmlDeviceGetNvLinkState``, ...) answers a list indexed by link (past its end:
  Invalid Argument). Masks (CPU and memory affinity) are lists of 64-bit words as hex strings.
  ``nvmlDeviceGetFieldValues`` maps field ids to ``{"valueType": t, "value": v}`` or
  ``{"nvmlReturn": code}``; a field not listed answers Not Supported in its entry.
* ``pairs``: ``nvmlDeviceGetTopologyCommonAncestor`` as a matrix; ``nvmlDeviceGetP2PStatus`` as
  one matrix per capability index (row = first GPU).

Anywhere an answer goes, ``{"error": "NotSupported"}`` (or another name in ``ERRORS``) makes the call
raise that NVML error. A call the fixture does not record raises AssertionError, so a fixture gap
fails a test instead of passing as "n/a".
"""
from __future__ import annotations

import copy
import json
import os
from types import SimpleNamespace

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nvml")

# name -> (nvmlReturn_t value, the text pynvml's NVMLError prints)
ERRORS = {
    "InvalidArgument": (2, "Invalid Argument"),
    "NotSupported": (3, "Not Supported"),
    "NoPermission": (4, "Insufficient Permissions"),
    "DriverNotLoaded": (9, "Driver Not Loaded"),
    "LibraryNotFound": (12, "NVML Shared Library Not Found"),
    "GpuIsLost": (15, "GPU is lost"),
    "LibRmVersionMismatch": (18, "RM has detected an NVML/RM version mismatch."),
    "Unknown": (999, "Unknown Error"),
}
_TEXT = dict(ERRORS.values())
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return _TEXT.get(self.value, f"NVML error {self.value}")


_ERROR_CLASSES = {name: type(f"NVMLError_{name}", (NVMLError,), {}) for name in ERRORS}


def _raise(name: str):
    raise _ERROR_CLASSES[name](ERRORS[name][0])


class Handle:
    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"<fake nvmlDevice {self.index}>"


def load_fixture(name: str) -> dict:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


class FakeNVML:
    """Answers the pynvml calls commprof.verbs.topo makes. ``fx`` is the fixture; tests may edit it."""

    NVMLError = NVMLError

    def __init__(self, fixture: str | dict, init_error: str | None = None):
        self.fx = copy.deepcopy(fixture) if isinstance(fixture, dict) else load_fixture(fixture)
        self.init_error = init_error
        self.initialised = 0
        self.__version__ = f"{self.fx.get('nvidia_ml_py', '?')} (fake answering from recorded fixture)"
        for name, cls in _ERROR_CLASSES.items():
            setattr(self, cls.__name__, cls)

    # --- lookup -------------------------------------------------------------------------------
    @staticmethod
    def _value(answer):
        if isinstance(answer, dict) and "error" in answer:
            _raise(answer["error"])
        return answer

    def _box(self, call):
        if call not in self.fx:
            raise AssertionError(f"fixture records no answer for {call}")
        return self._value(self.fx[call])

    def _gpu(self, h: Handle, call: str):
        assert isinstance(h, Handle), f"{call} got {h!r}, not a device handle"
        own = self.fx["gpus"][h.index]
        if call in own:
            return self._value(own[call])
        if call in self.fx.get("all_gpus", {}):
            return self._value(self.fx["all_gpus"][call])
        raise AssertionError(f"fixture records no answer for {call} on GPU {h.index}")

    def _link(self, h: Handle, call: str, link: int):
        answers = self._gpu(h, call)
        if not isinstance(link, int) or link < 0 or link >= len(answers):
            _raise("InvalidArgument")
        return self._value(answers[link])

    def _pair(self, call: str, h1: Handle, h2: Handle, matrix=None):
        m = matrix if matrix is not None else self.fx["pairs"][call]
        return self._value(m[h1.index][h2.index])

    @staticmethod
    def _words(hex_words, n: int):
        words = [int(w, 16) for w in hex_words][:n]
        return words + [0] * (n - len(words))

    # --- pynvml calls -------------------------------------------------------------------------
    def nvmlInit(self):
        if self.init_error:
            _raise(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self):
        assert self.initialised > 0, "nvmlShutdown without nvmlInit"
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        return self._box("nvmlSystemGetDriverVersion")

    def nvmlDeviceGetCount(self):
        return self._box("nvmlDeviceGetCount")

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < self.nvmlDeviceGetCount():
            _raise("InvalidArgument")
        self._value(self.fx["gpus"][index].get("nvmlDeviceGetHandleByIndex"))
        return Handle(index)

    def nvmlDeviceGetName(self, h):
        return self._gpu(h, "nvmlDeviceGetName")

    def nvmlDeviceGetPciInfo(self, h):
        a = self._gpu(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=a["busId"].encode())      # a ctypes char array reads as bytes

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(**self._gpu(h, "nvmlDeviceGetMemoryInfo"))

    def nvmlDeviceGetBAR1MemoryInfo(self, h):
        return SimpleNamespace(**self._gpu(h, "nvmlDeviceGetBAR1MemoryInfo"))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkGeneration")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkWidth")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkGeneration")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkWidth")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self._gpu(h, "nvmlDeviceGetGpuMaxPcieLinkGeneration")

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._gpu(h, "nvmlDeviceGetPcieReplayCounter")

    def nvmlDeviceGetCpuAffinity(self, h, n_words):
        return self._words(self._gpu(h, "nvmlDeviceGetCpuAffinity"), n_words)

    def nvmlDeviceGetMemoryAffinity(self, h, n_words, scope):
        assert scope == 0, "commprof asks for the NUMA-node scope"
        return self._words(self._gpu(h, "nvmlDeviceGetMemoryAffinity"), n_words)

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        recorded = self._gpu(h, "nvmlDeviceGetFieldValues")
        out = []
        for f in field_ids:
            fid, scope = f if isinstance(f, tuple) else (f, 0)
            a = recorded.get(str(fid), {"nvmlReturn": ERRORS["NotSupported"][0]})
            ret, vtype = a.get("nvmlReturn", 0), a.get("valueType", 1)
            value = SimpleNamespace(**{m: (a.get("value", 0) if t == vtype else 0) for t, m in _VALUE_MEMBER.items()})
            out.append(SimpleNamespace(fieldId=fid, scopeId=scope, nvmlReturn=ret, valueType=vtype, value=value))
        return out

    def nvmlDeviceGetNvLinkState(self, h, link):
        return self._link(h, "nvmlDeviceGetNvLinkState", link)

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return self._link(h, "nvmlDeviceGetNvLinkVersion", link)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self._link(h, "nvmlDeviceGetNvLinkRemoteDeviceType", link)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self._link(h, "nvmlDeviceGetNvLinkRemotePciInfo", link).encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        assert h1.index != h2.index
        return self._pair("nvmlDeviceGetTopologyCommonAncestor", h1, h2)

    def nvmlDeviceGetP2PStatus(self, h1, h2, p2p_index):
        if not isinstance(p2p_index, int):
            # What ctypes does with NVML_P2P_CAPS_INDEX_READ, the tuple (0,) in nvidia-ml-py 13.
            raise TypeError(f"argument 3: wrong type {type(p2p_index).__name__}")
        return self._pair("nvmlDeviceGetP2PStatus", h1, h2,
                          self.fx["pairs"]["nvmlDeviceGetP2PStatus"][str(p2p_index)])

    # --- health calls (commprof.capture.nvmlhealth) ------------------------------------------
    # A call with arguments past the handle answers from a dict keyed by the arguments joined by ","
    # ("1,0" for nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE)).
    # A health call a topology-only fixture does not record answers Not Supported (as on a GPU that
    # lacks the field), so commprof topo --out on those fixtures samples health as "n/a".
    def _health(self, h, call):
        if call not in self.fx["gpus"][h.index] and call not in self.fx.get("all_gpus", {}):
            _raise("NotSupported")
        return self._gpu(h, call)

    def _gpu_args(self, h, call, *args):
        a = self._health(h, call)
        if not args:
            return a
        key = ",".join(str(x) for x in args)
        if not isinstance(a, dict) or key not in a:
            raise AssertionError(f"fixture records no answer for {call}({key}) on GPU {h.index}")
        return self._value(a[key])

    def nvmlDeviceGetEccMode(self, h):
        return self._health(h, "nvmlDeviceGetEccMode")

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        return self._gpu_args(h, "nvmlDeviceGetTotalEccErrors", error_type, counter_type)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        return self._gpu_args(h, "nvmlDeviceGetRetiredPages", cause)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._health(h, "nvmlDeviceGetRetiredPagesPendingStatus")

    def nvmlDeviceGetRemappedRows(self, h):
        return tuple(self._health(h, "nvmlDeviceGetRemappedRows"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._health(h, "nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._gpu_args(h, "nvmlDeviceGetTemperature", sensor)

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        return self._gpu_args(h, "nvmlDeviceGetTemperatureThreshold", kind)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._health(h, "nvmlDeviceGetPowerUsage")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._health(h, "nvmlDeviceGetEnforcedPowerLimit")

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        self._health(h, "nvmlDeviceGetNvLinkErrorCounter")
        per_link = self._link(h, "nvmlDeviceGetNvLinkErrorCounter", link)
        return self._value(per_link[counter])

    def nvmlDeviceGetGpuFabricInfo(self, h):
        return SimpleNamespace(**self._health(h, "nvmlDeviceGetGpuFabricInfo"))

    def nvmlDeviceGetMigMode(self, h):
        return tuple(self._health(h, "nvmlDeviceGetMigMode"))

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._health(h, "nvmlDeviceGetPersistenceMode")


def with_health(topo_fixture: str, health_fixture: str) -> dict:
    """A topology fixture with a health overlay (``tests/data/nvml/health/*.json``) merged in: its
    ``all_gpus`` and per-GPU ``gpus`` entries add to or replace the topology fixture's."""
    fx = load_fixture(topo_fixture)
    with open(os.path.join(DATA, "health", health_fixture), encoding="utf-8") as f:
        h = json.load(f)
    fx.setdefault("all_gpus", {}).update(h.get("all_gpus", {}))
    for i, g in h.get("gpus", {}).items():
        fx["gpus"][int(i)].update(g)
    fx["_health_source"] = h.get("_source")
    return fx
