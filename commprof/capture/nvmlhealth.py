"""The GPUs' health as NVML reports it, sampled before, during (a light sampler thread) and after a
run: ECC, retired pages, row remapping, clocks-event (throttle) reasons, temperatures against their
slowdown/shutdown thresholds, power against its limit, NVLink and PCIe error counters, the PCIe link,
fabric manager state, MIG and persistence mode. ``commprof check`` judges them
(:mod:`commprof.analysis.checkitems_health`).

NVML calls and constants from the NVML API reference (docs.nvidia.com/deploy/nvml-api, nvml.h API 12/13).
Every answer NVML cannot give (Not Supported, no permission, a binding without the call) is
:data:`NA`, never a crash. XID errors are not readable by polling NVML (they arrive as events of
``nvmlEventSetWait``, only while registered): the field says so and where to look (``dmesg | grep -i xid``).
pynvml is imported inside the functions, so importing this module works without it.
"""
from __future__ import annotations

import threading

from commprof.model.machine import now_iso
from commprof.results.health import HEALTH_KEYS, NA, write_health

# nvmlClocksEventReasons bits (nvml.h: nvmlClocksThrottleReason*, renamed nvmlClocksEventReason* in 12.2).
CLOCKS_EVENT_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                     0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                     0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
ECC_CORRECTED, ECC_UNCORRECTED = 0, 1          # nvmlMemoryErrorType_t
ECC_VOLATILE, ECC_AGGREGATE = 0, 1             # nvmlEccCounterType_t
RETIRED_SBE, RETIRED_DBE = 0, 1                # nvmlPageRetirementCause_t
TEMP_SHUTDOWN, TEMP_SLOWDOWN = 0, 1            # nvmlTemperatureThresholds_t
TEMP_GPU = 0                                   # NVML_TEMPERATURE_GPU
# nvmlNvLinkErrorCounter_t
NVLINK_REPLAY, NVLINK_RECOVERY, NVLINK_CRC_FLIT, NVLINK_CRC_DATA = 0, 1, 2, 3
MAX_LINKS = 18                                 # NVML_NVLINK_MAX_LINKS is 18 on H100; probing stops at Invalid Argument
# nvmlGpuFabricState_t
FABRIC_STATE = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
XID_NA = "n/a: NVML reports XIDs only as events while registered; look in the kernel log (dmesg | grep -i xid)"
SAMPLE_PERIOD_S = 2.0


def _ask(nvml, call: str, *args):
    fn = getattr(nvml, call, None)
    if fn is None:
        return NA
    try:
        return fn(*args)
    except nvml.NVMLError:
        return NA


def _first(nvml, calls, *args):
    for c in calls:
        v = _ask(nvml, c, *args)
        if v is not NA:
            return v
    return NA


def _int(v):
    return NA if v is NA or v is None else int(v)


def _onoff(v):
    if v is NA:
        return NA
    cur = v[0] if isinstance(v, (list, tuple)) else v
    return "enabled" if int(cur) == 1 else "disabled"


def _text(v):
    if v is NA:
        return NA
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def clocks_reasons(mask) -> list[str] | str:
    """An nvmlClocksEventReasons bit mask -> the names of the active reasons (``[]``: none)."""
    if mask is NA:
        return NA
    return [name for bit, name in CLOCKS_EVENT_BITS.items() if int(mask) & bit]


def _nvlink_counters(nvml, h) -> tuple:
    per_link, crc, replay, recovery = {}, 0, 0, 0
    any_ok = False
    for link in range(MAX_LINKS):
        state = _ask(nvml, "nvmlDeviceGetNvLinkState", h, link)
        if state is NA:
            break
        if int(state) != 1:
            continue
        c = [_ask(nvml, "nvmlDeviceGetNvLinkErrorCounter", h, link, k)
             for k in (NVLINK_CRC_FLIT, NVLINK_CRC_DATA, NVLINK_REPLAY, NVLINK_RECOVERY)]
        if all(x is NA for x in c):
            continue
        any_ok = True
        v = [0 if x is NA else int(x) for x in c]
        per_link[str(link)] = {"crc": v[0] + v[1], "replay": v[2], "recovery": v[3]}
        crc, replay, recovery = crc + v[0] + v[1], replay + v[2], recovery + v[3]
    if not any_ok:
        return NA, NA, NA, NA
    return crc, replay, recovery, per_link


def _fabric(nvml, h):
    info = _ask(nvml, "nvmlDeviceGetGpuFabricInfo", h)
    if info is NA:
        return NA
    state = getattr(info, "state", None)
    return FABRIC_STATE.get(int(state), f"state {state}") if state is not None else NA


def _retired(nvml, h, cause):
    v = _ask(nvml, "nvmlDeviceGetRetiredPages", h, cause)
    return NA if v is NA else len(v)


def sample_gpu(nvml, index: int, h) -> dict:
    """One GPU's health fields (:data:`HEALTH_KEYS`) now."""
    g = {"index": index, "name": _text(_ask(nvml, "nvmlDeviceGetName", h))}
    pci = _ask(nvml, "nvmlDeviceGetPciInfo", h)
    g["pci_bus_id"] = NA if pci is NA else _text(pci.busId)
    g["ecc_mode"] = _onoff(_ask(nvml, "nvmlDeviceGetEccMode", h))
    for kind, ctype in (("volatile", ECC_VOLATILE), ("aggregate", ECC_AGGREGATE)):
        for err, etype in (("corrected", ECC_CORRECTED), ("uncorrected", ECC_UNCORRECTED)):
            g[f"ecc_{kind}_{err}"] = _int(_ask(nvml, "nvmlDeviceGetTotalEccErrors", h, etype, ctype))
    g["retired_pages_sbe"] = _retired(nvml, h, RETIRED_SBE)
    g["retired_pages_dbe"] = _retired(nvml, h, RETIRED_DBE)
    pend = _ask(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", h)
    g["retired_pages_pending"] = NA if pend is NA else bool(int(pend))
    rr = _ask(nvml, "nvmlDeviceGetRemappedRows", h)
    if rr is NA:
        g.update(remapped_rows_correctable=NA, remapped_rows_uncorrectable=NA, remapped_rows_pending=NA,
                 remapped_rows_failure=NA)
    else:
        g.update(remapped_rows_correctable=int(rr[0]), remapped_rows_uncorrectable=int(rr[1]),
                 remapped_rows_pending=bool(int(rr[2])), remapped_rows_failure=bool(int(rr[3])))
    g["xid_errors"] = XID_NA
    g["clocks_event_reasons"] = clocks_reasons(_first(
        nvml, ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), h))
    g["temperature_c"] = _int(_ask(nvml, "nvmlDeviceGetTemperature", h, TEMP_GPU))
    g["temperature_slowdown_c"] = _int(_ask(nvml, "nvmlDeviceGetTemperatureThreshold", h, TEMP_SLOWDOWN))
    g["temperature_shutdown_c"] = _int(_ask(nvml, "nvmlDeviceGetTemperatureThreshold", h, TEMP_SHUTDOWN))
    pw = _ask(nvml, "nvmlDeviceGetPowerUsage", h)
    g["power_w"] = NA if pw is NA else round(int(pw) / 1000.0, 3)              # milliwatts
    lim = _first(nvml, ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"), h)
    g["power_limit_w"] = NA if lim is NA else round(int(lim) / 1000.0, 3)
    (g["nvlink_crc_errors"], g["nvlink_replay_errors"], g["nvlink_recovery_errors"],
     g["nvlink_errors_per_link"]) = _nvlink_counters(nvml, h)
    g["pcie_replay_count"] = _int(_ask(nvml, "nvmlDeviceGetPcieReplayCounter", h))
    g["pcie_link_gen_current"] = _int(_ask(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", h))
    g["pcie_link_gen_max"] = _int(_first(nvml, ("nvmlDeviceGetGpuMaxPcieLinkGeneration",
                                                "nvmlDeviceGetMaxPcieLinkGeneration"), h))
    g["pcie_link_width_current"] = _int(_ask(nvml, "nvmlDeviceGetCurrPcieLinkWidth", h))
    g["pcie_link_width_max"] = _int(_ask(nvml, "nvmlDeviceGetMaxPcieLinkWidth", h))
    g["fabric_state"] = _fabric(nvml, h)
    g["mig_mode"] = _onoff(_ask(nvml, "nvmlDeviceGetMigMode", h))
    g["persistence_mode"] = _onoff(_ask(nvml, "nvmlDeviceGetPersistenceMode", h))
    return {k: g.get(k, NA) for k in HEALTH_KEYS}


def _handles(nvml) -> list:
    n = _ask(nvml, "nvmlDeviceGetCount")
    if n is NA:
        return []
    out = []
    for i in range(int(n)):
        h = _ask(nvml, "nvmlDeviceGetHandleByIndex", i)
        if h is not NA:
            out.append((i, h))
    return out


def sample(nvml, phase: str) -> dict:
    """One sample of every GPU: ``{"phase", "time", "gpus": [...]}``."""
    return {"phase": phase, "time": now_iso(), "gpus": [sample_gpu(nvml, i, h) for i, h in _handles(nvml)]}


def _open_nvml(nvml=None):
    """An initialised NVML module, or None when there is no binding or no driver."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError):     # no driver, library mismatch, no libnvidia-ml.so
        return None
    return nvml


class HealthSampler:
    """Samples before :meth:`start`, every ``period_s`` in a daemon thread, and at :meth:`stop`.
    Without NVML it records nothing and :attr:`available` is False (the reason in :attr:`why`)."""

    def __init__(self, nvml=None, period_s: float = SAMPLE_PERIOD_S, max_samples: int = 600):
        self.nvml = _open_nvml(nvml)
        self.available = self.nvml is not None
        self.why = "" if self.available else "no NVIDIA GPU/driver (NVML did not start): health not judged"
        self.period_s, self.max_samples = period_s, max_samples
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> "HealthSampler":
        if self.available:
            self.samples.append(sample(self.nvml, "before"))
            self._thread = threading.Thread(target=self._loop, name="commprof-health", daemon=True)
            self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(self.period_s):
            if len(self.samples) >= self.max_samples:
                return
            self.samples.append(sample(self.nvml, "during"))

    def stop(self) -> dict:
        """Stop, take the "after" sample, shut NVML down; returns the document."""
        if self.available:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=self.period_s + 5)
            self.samples.append(sample(self.nvml, "after"))
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass
        return self.document()

    def document(self) -> dict:
        return {"kind": "health", "source": "nvml", "xid_note": XID_NA, "samples": list(self.samples),
                "not_judged": self.why}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def sample_once(nvml=None, phase: str = "before") -> dict:
    """One health sample of every GPU (``commprof topo``); a document without samples without NVML."""
    s = HealthSampler(nvml)
    if s.available:
        s.samples.append(sample(s.nvml, phase))
        try:
            s.nvml.nvmlShutdown()
        except s.nvml.NVMLError:
            pass
    return s.document()


def save_health(out_dir: str, doc: dict) -> bool:
    """Write ``doc`` into ``out_dir`` when it holds samples; True when written."""
    if not doc.get("samples"):
        return False
    write_health(doc, out_dir)
    return True
