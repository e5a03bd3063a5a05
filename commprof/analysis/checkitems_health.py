"""The GPUs' health items (H1-H8) of the checklist: each reads the ``health.json`` of a box's results
dirs (NVML samples from ``commprof topo``/``sweep``, or ``commprof import nvidia-smi-q``) and the
``[health]`` thresholds, and gives PASS / WARN / FAIL / SKIP with the GPU named and a buyer's
"what now" in the hint (reject, ask the seller for X, re-test)."""
from __future__ import annotations

import json
import os

from commprof.analysis.verdict import Item
from commprof.model.units import json_number as _num

NA = "n/a"
HEALTH_JSON = "health.json"
LOAD_PHASES = ("during", "after")      # samples taken under load (or right after it)
NO_HEALTH_HINT = ("run 'commprof topo --out DIR' or 'commprof sweep' on the box (NVML samples the GPUs' health), "
                  "or ask the seller for 'nvidia-smi -q' (or -q -x) of every GPU taken right after a load test and "
                  "import it: commprof import nvidia-smi-q FILE")
XID_HINT = "XID errors are not in these samples: ask for 'dmesg | grep -i xid' (kernel log) of the box after the run"


def read_docs(dirs) -> list[dict]:
    out = []
    for d in dirs or ():
        p = os.path.join(d, HEALTH_JSON)
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                out.append(json.load(f))
    return out


def _samples(docs):
    return [s for d in docs for s in d.get("samples", []) if s.get("gpus")]


def _by_gpu(samples) -> dict:
    out = {}
    for s in samples:
        for g in s["gpus"]:
            out.setdefault(g.get("index"), []).append((s.get("phase", "?"), g))
    return out


def _gpu_list(ids) -> str:
    ids = list(dict.fromkeys(str(i) for i in ids))
    return "GPU " + ", ".join(ids[:8]) + (f" (+{len(ids) - 8})" if len(ids) > 8 else "")


def _growth(series, key):
    vals = [_num(g.get(key)) for _, g in series]
    vals = [v for v in vals if v is not None]
    return (vals[-1] - vals[0]) if len(vals) >= 2 else None


def _last(series, key):
    vals = [_num(g.get(key)) for _, g in series if _num(g.get(key)) is not None]
    return vals[-1] if vals else None


def _skip(id_, name, why, threshold, src, hint=NO_HEALTH_HINT):
    return Item(id_, name, "SKIP", why, threshold, src, hint)


def item_ecc(gpus, t) -> Item:
    name, thr = "ECC errors", "0 uncorrectable; ECC on; corrected not growing"
    if all(g.get("ecc_mode") == NA and g.get("ecc_volatile_uncorrected") == NA for s in gpus.values() for _, g in s):
        return _skip("H1", name, "n/a from the source (ECC not reported)", thr, t["source"])
    counted = any(_num(g.get(k)) is not None for s in gpus.values() for _, g in s
                  for k in ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected"))
    if not counted and not any(g.get("ecc_mode") == "disabled" for s in gpus.values() for _, g in s):
        # ECC on (or unknown) but no uncorrectable count in the source: nothing to pass on
        return _skip("H1", name, "n/a from the source (ECC on, but its uncorrectable error counts not reported)",
                     thr, t["source"], "ask the seller for 'nvidia-smi -q -d ECC' of every GPU, taken after a load test")
    unc = [i for i, s in gpus.items() if any((_num(g.get(k)) or 0) > 0 for _, g in s
                                             for k in ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected"))]
    if unc:
        n = max((_num(g.get("ecc_aggregate_uncorrected")) or _num(g.get("ecc_volatile_uncorrected")) or 0)
                for i in unc for _, g in gpus[i])
        return Item("H1", name, "FAIL", f"{_gpu_list(unc)}: uncorrectable ECC errors (up to {n})", thr, t["source"],
                    "what now: reject the GPU named, or ask the seller to replace it (RMA) and send "
                    "'nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER' after a reset and a new load test")
    off = [i for i, s in gpus.items() if s[-1][1].get("ecc_mode") == "disabled"]
    grow = [i for i, s in gpus.items() if (_growth(s, "ecc_volatile_corrected") or 0) >= t["ecc_corrected_growth_warn"]]
    if off or grow:
        parts = ([f"{_gpu_list(off)}: ECC disabled"] if off else []) + \
                ([f"{_gpu_list(grow)}: corrected ECC errors grew during the run"] if grow else [])
        return Item("H1", name, "WARN", "; ".join(parts), thr, t["source"],
                    "what now: ask the seller to enable ECC (nvidia-smi -e 1, then a reboot) and re-test; corrected "
                    "errors growing under load: ask for the GPU's aggregate ECC history")
    return Item("H1", name, "PASS", f"0 uncorrectable on {len(gpus)} GPUs", thr, t["source"])


def item_memory_retire(gpus, t) -> Item:
    name, thr = "retired pages / remapped rows", "none pending, no remap failure"
    keys = ("retired_pages_pending", "remapped_rows_pending", "remapped_rows_failure", "remapped_rows_uncorrectable",
            "retired_pages_dbe")
    if all(g.get(k) == NA for s in gpus.values() for _, g in s for k in keys):
        return _skip("H2", name, "n/a from the source (retirement and remapping not reported)", thr, t["source"])
    bad, warn = {}, {}
    for i, s in gpus.items():
        g = s[-1][1]
        why = [w for k, w in (("retired_pages_pending", "page retirement pending"),
                              ("remapped_rows_pending", "row remap pending"),
                              ("remapped_rows_failure", "row remap failed")) if g.get(k) is True]
        if why:
            bad[i] = why
        n = (_num(g.get("remapped_rows_uncorrectable")) or 0) + (_num(g.get("retired_pages_dbe")) or 0)
        if n >= t["retired_pages_warn"]:
            warn[i] = n
    if bad:
        return Item("H2", name, "FAIL", "; ".join(f"GPU {i}: {', '.join(w)}" for i, w in list(bad.items())[:6]),
                    thr, t["source"],
                    "what now: a pending retirement/remap needs a GPU reset; a remap failure needs an RMA. Ask the "
                    "seller to reset (or replace) the GPU named and send 'nvidia-smi -q -d ROW_REMAPPER,"
                    "PAGE_RETIREMENT' again; reject if it does not clear")
    if warn:
        return Item("H2", name, "WARN", "; ".join(f"GPU {i}: {n} rows/pages retired for uncorrectable errors"
                                                  for i, n in list(warn.items())[:6]), thr, t["source"],
                    "what now: the memory has failed before; ask the seller for the GPU's error history or a "
                    "replacement; re-test after a reset")
    return Item("H2", name, "PASS", f"none pending on {len(gpus)} GPUs", thr, t["source"])


def item_throttle(gpus, t) -> Item:
    name, thr = "clock throttle under load", "no HW slowdown / thermal / power brake"
    rows = {i: [(p, g) for p, g in s if p in LOAD_PHASES] or s for i, s in gpus.items()}
    under_load = any(p in LOAD_PHASES for s in gpus.values() for p, _ in s)
    if all(g.get("clocks_event_reasons") == NA and not isinstance(g.get("clocks_event_counters_us"), dict)
           for s in gpus.values() for _, g in s):
        return _skip("H3", name, "n/a from the source (clocks event reasons not reported)", thr, t["source"])
    fail, warn = {}, {}
    for i, s in rows.items():
        seen = {r for _, g in s if isinstance(g.get("clocks_event_reasons"), list) for r in g["clocks_event_reasons"]}
        f = sorted(seen & set(t["fail_reasons"]))
        w = sorted(seen & set(t["warn_reasons"]))
        if f:
            fail[i] = f
        elif w:
            warn[i] = w
    when = "under load" if under_load else "in the one sample given (load unknown)"
    if fail:
        txt = "; ".join(f"GPU {i}: {', '.join(r)}" for i, r in list(fail.items())[:6])
        return Item("H3", name, "FAIL" if under_load else "WARN", f"{txt} {when}", thr, t["source"],
                    "what now: one throttling GPU sets the box's tail latency. Ask the seller to fix cooling/power "
                    "(HW slowdown: PSU or temperature; power brake: the chassis' power signal) and re-test: "
                    "commprof sweep with the box hot, then commprof check on the new dir")
    if warn:
        txt = "; ".join(f"GPU {i}: {', '.join(r)}" for i, r in list(warn.items())[:6])
        return Item("H3", name, "WARN", f"{txt} {when}", thr, t["source"],
                    "what now: the GPU ran at its software power or thermal limit; ask for the configured power "
                    "limit (nvidia-smi -q -d POWER) and the datacenter's inlet temperature; re-test")
    held, grew = _counter_findings(gpus, t)
    if grew:
        return Item("H3", name, "FAIL", "; ".join(grew[:6]) + " (clocks event counters)", thr, t["source"],
                    "what now: one throttling GPU sets the box's tail latency. Ask the seller to fix cooling/power "
                    "and re-test: commprof sweep with the box hot, then commprof check on the new dir")
    if held:
        return Item("H3", name, "WARN", "; ".join(held[:6]) + " since the driver loaded (clocks event counters; "
                    "no reason active in the sample)", thr, t["source"],
                    "what now: the GPU has been slowed by heat or its power supply before; ask the seller when "
                    "(nvidia-smi -q -d PERFORMANCE before and after a load test: the counters must not grow) and "
                    "for the cooling spec; re-test with commprof sweep with the box hot")
    return Item("H3", name, "PASS", f"no throttle reason {when} on {len(rows)} GPUs", thr, t["source"], XID_HINT)


def _counter_findings(gpus, t) -> tuple[list[str], list[str]]:
    """From the "Clocks Event Reasons Counters" (time each reason held the clocks down since the driver
    loaded): (GPUs with time under a counted reason, GPUs whose hardware-slowdown time grew under load)."""
    counted = t.get("counter_warn_reasons", [])
    held, grew = [], []
    for i, s in gpus.items():
        series = [(p, g["clocks_event_counters_us"]) for p, g in s if isinstance(g.get("clocks_event_counters_us"), dict)]
        if not series:
            continue
        last = series[-1][1]
        if len(series) >= 2 and any(p in LOAD_PHASES for p, _ in series):
            up = {r: (_num(last.get(r)) or 0) - (_num(series[0][1].get(r)) or 0) for r in t["fail_reasons"]}
            up = {r: v for r, v in up.items() if v > 0}
            if up:
                grew.append(f"GPU {i}: " + ", ".join(f"{r} +{v / 1e6:.2f} s" for r, v in sorted(up.items()))
                            + " during the run")
                continue
        got = {r: _num(last.get(r)) for r in counted if (_num(last.get(r)) or 0) > 0}
        if got:
            held.append(f"GPU {i}: " + ", ".join(f"{r} {v / 1e6:.2f} s" for r, v in sorted(got.items())))
    return held, grew


def item_temperature(gpus, t) -> Item:
    name = "temperature vs slowdown"
    thr = f"hottest > {t['temp_margin_warn_c']:g} C below the slowdown threshold"
    # the margin to the slowdown threshold, and to the max operating temperature (above it the driver
    # may hold the clocks below base, NVML_TEMPERATURE_THRESHOLD_GPU_MAX; a WARN, never a FAIL: it is
    # a software limit, not a fault), each the smallest over every GPU, in one walk
    worst = near_max = None
    for i, s in gpus.items():
        for _, g in s:
            temp = _num(g.get("temperature_c"))
            if temp is None:
                continue
            slow, mx = _num(g.get("temperature_slowdown_c")), _num(g.get("temperature_max_operating_c"))
            if slow is not None and (worst is None or slow - temp < worst[0]):
                worst = (slow - temp, i, temp, slow, g)
            if mx is not None and (near_max is None or mx - temp < near_max[0]):
                near_max = (mx - temp, i, temp, mx)
    if worst is None and near_max is None:
        return _skip("H4", name, "n/a from the source (temperature or its slowdown threshold not reported)",
                     thr, t["source"])
    if worst is None:
        m, i, temp, mx = near_max
        value = f"GPU {i}: {temp:g} C, max operating {mx:g} C (slowdown threshold not reported)"
        if m < t["temp_margin_warn_c"]:
            return Item("H4", name, "WARN", value, thr, t["source"], MAX_OP_HINT)
        return Item("H4", name, "PASS", value, thr, t["source"])
    m, i, temp, slow, g = worst
    pw, lim = _num(g.get("power_w")), _num(g.get("power_limit_w"))
    power = f"; power {pw:g} of {lim:g} W" if pw is not None and lim is not None else ""
    value = f"GPU {i}: {temp:g} C, slowdown at {slow:g} C{power}"
    if m <= 0:
        return Item("H4", name, "FAIL", value, thr, t["source"],
                    "what now: the GPU reached its slowdown temperature; ask the seller to fix the cooling and re-test")
    if m < t["temp_margin_warn_c"]:
        return Item("H4", name, "WARN", value, thr, t["source"],
                    "what now: near slowdown; ask for the cooling spec and inlet temperature, re-test under a longer load")
    if near_max is not None and near_max[0] < t["temp_margin_warn_c"]:
        _, j, tj, mx = near_max
        return Item("H4", name, "WARN", f"{value}; GPU {j}: {tj:g} C, {mx - tj:g} C below its max operating {mx:g} C", thr,
                    t["source"], MAX_OP_HINT)
    return Item("H4", name, "PASS", value, thr, t["source"])


MAX_OP_HINT = ("what now: at its max operating temperature the driver may hold the GPU's clocks below base; ask the "
               "seller for the cooling spec and why the GPU runs there (or why its limit is set that low), and "
               "re-test under a longer load")


def item_nvlink_errors(gpus, t) -> Item:
    name, thr = "NVLink CRC/replay/recovery errors", f"growth < {t['nvlink_error_growth_warn']} during the run"
    keys = ("nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors")
    if all(_num(g.get(k)) is None for s in gpus.values() for _, g in s for k in keys):
        return _skip("H5", name, "n/a from the source (no NVLink counters: no NVLink, or not reported)", thr,
                     t["source"], "")
    multi = any(len(s) >= 2 for s in gpus.values())
    fail, warn = [], []
    for i, s in gpus.items():
        if multi:
            crc, rep, rec = (_growth(s, k) or 0 for k in keys)
            what = "grew during the run"
        else:
            crc, rep, rec = (_last(s, k) or 0 for k in keys)
            what = "since the counters were last reset"
        text = f"GPU {i}: CRC {crc:g}, replay {rep:g}, recovery {rec:g} {what}"
        if multi and (rec > 0 or crc + rep >= t["nvlink_error_growth_fail"]):
            fail.append(text)
        elif crc + rep + rec >= t["nvlink_error_growth_warn"]:
            warn.append(text)
    hint = ("what now: errors on one link point at the link or the baseboard; ask the seller for "
            "'nvidia-smi nvlink -e' per link and a reseat or replacement, then re-test with commprof sweep")
    if fail:
        return Item("H5", name, "FAIL", "; ".join(fail[:4]), thr, t["source"], hint)
    if warn:
        return Item("H5", name, "WARN", "; ".join(warn[:4]), thr, t["source"], hint)
    return Item("H5", name, "PASS", f"no NVLink errors {'during the run' if multi else 'counted'} on {len(gpus)} GPUs",
                thr, t["source"])


def item_pcie_health(gpus, t) -> Item:
    name, thr = "PCIe link under load and replays", "current gen/width == max under load; replays not growing"
    rows = {i: [(p, g) for p, g in s if p in LOAD_PHASES] for i, s in gpus.items()}
    have = any(_num(g.get("pcie_link_gen_current")) is not None for s in gpus.values() for _, g in s)
    if not have and all(_num(g.get("pcie_replay_count")) is None for s in gpus.values() for _, g in s):
        return _skip("H6", name, "n/a from the source (PCIe link not reported)", thr, t["source"])
    down, replay_f, replay_w = [], [], []
    loaded = any(rows.values())
    for i, s in gpus.items():
        look = rows[i] or s
        for _, g in look:
            cg, mg = _num(g.get("pcie_link_gen_current")), _num(g.get("pcie_link_gen_max"))
            cw, mw = _num(g.get("pcie_link_width_current")), _num(g.get("pcie_link_width_max"))
            if None not in (cg, mg) and cg < mg or None not in (cw, mw) and cw < mw:
                down.append(f"GPU {i}: Gen{cg} x{cw} of Gen{mg} x{mw}")
                break
        grow = _growth(s, "pcie_replay_count")
        if grow is not None and grow >= t["pcie_replay_growth_fail"]:
            replay_f.append(f"GPU {i}: {grow:g} PCIe replays during the run")
        elif grow is not None and grow >= t["pcie_replay_growth_warn"]:
            replay_w.append(f"GPU {i}: {grow:g} PCIe replays during the run")
    hint = ("what now: a link below its max under load is downtrained (a bad slot, riser or BIOS setting); ask the "
            "seller to reseat the card or fix the slot and send 'nvidia-smi -q -d PCIE' taken under load; re-test")
    if down and loaded:
        return Item("H6", name, "FAIL", "; ".join(down[:4]) + " under load", thr, t["source"], hint)
    if replay_f:
        return Item("H6", name, "FAIL", "; ".join(replay_f[:4]), thr, t["source"], hint)
    if replay_w:
        return Item("H6", name, "WARN", "; ".join(replay_w[:4]), thr, t["source"], hint)
    if not loaded and not any(len(s) >= 2 for s in gpus.values()):
        idle = f" ({'; '.join(down[:2])})" if down else ""
        return _skip("H6", name, "no sample under load: the current link is not judged, a link drops its gen at "
                     f"idle{idle}", thr, t["source"],
                     "run commprof sweep on the box (it samples during the run), or ask for 'nvidia-smi -q -d PCIE' "
                     "taken under load; the max gen/width is item C6")
    return Item("H6", name, "PASS", f"at max {'under load' if loaded else 'in the samples'}, no replays growing "
                f"on {len(gpus)} GPUs", thr, t["source"])


def item_fabric(gpus, t) -> Item:
    name, thr = "fabric manager (NVSwitch boxes)", "state completed"
    states = {i: s[-1][1].get("fabric_state", NA) for i, s in gpus.items()}
    real = {i: v for i, v in states.items() if v not in (NA, "not supported")}
    if not real:
        return _skip("H7", name, "no NVSwitch fabric reported (not an NVSwitch box, or not reported)", thr,
                     t["source"], "")
    bad = {i: v for i, v in real.items() if v != "completed"}
    if bad:
        return Item("H7", name, "FAIL", "; ".join(f"GPU {i}: {v}" for i, v in list(bad.items())[:6]), thr, t["source"],
                    "what now: without fabric manager the NVSwitch GPUs cannot talk over NVLink; ask the seller to "
                    "start nvidia-fabricmanager (same version as the driver) and re-test")
    # NVML: the probe's status "must be checked only if state returns complete"; a completed registration
    # with a status other than success (e.g. "insufficient resources") leaves the GPU out of the NVLink
    # domain on multi-node NVLink boxes. A WARN: some single-node boxes report a non-success status too.
    unok = {i: s[-1][1].get("fabric_status", NA) for i in real for s in [gpus[i]]}
    unok = {i: v for i, v in unok.items() if v not in (NA, "success")}
    if unok:
        return Item("H7", name, "WARN", "; ".join(f"GPU {i}: completed, status {v}" for i, v in list(unok.items())[:6]),
                    thr, t["source"],
                    "what now: the GPU registered with the NVLink fabric but with an error status; on a multi-node "
                    "NVLink box (GB200 NVL) it is left out of the NVLink domain. Ask the seller for 'nvidia-smi -q' "
                    "Fabric sections of every GPU (Status Success, a non-zero CliqueId and ClusterUUID) and the "
                    "fabric manager / IMEX logs; re-test after the fix")
    return Item("H7", name, "PASS", f"completed on {len(real)} GPUs", thr, t["source"])


def item_modes(gpus, t) -> Item:
    name, thr = "MIG and persistence mode", "MIG off; persistence on"
    mig = [i for i, s in gpus.items() if s[-1][1].get("mig_mode") == "enabled"]
    off = [i for i, s in gpus.items() if s[-1][1].get("persistence_mode") == "disabled"]
    if all(s[-1][1].get("mig_mode") == NA and s[-1][1].get("persistence_mode") == NA for s in gpus.values()):
        return _skip("H8", name, "n/a from the source", thr, t["source"])
    parts = ([f"{_gpu_list(mig)}: MIG on (the GPU is split: one instance is not the whole GPU)"] if mig else []) + \
            ([f"{_gpu_list(off)}: persistence off (note: the driver reloads between runs, first calls slower)"]
             if off else [])
    if parts:
        return Item("H8", name, "WARN", "; ".join(parts), thr, t["source"],
                    "what now: ask the seller to turn MIG off (nvidia-smi -mig 0) for a whole-GPU test and "
                    "persistence on (nvidia-smi -pm 1, or nvidia-persistenced); re-test")
    return Item("H8", name, "PASS", f"MIG off, persistence on for {len(gpus)} GPUs", thr, t["source"])


def health_items(ev, th) -> list[Item]:
    """The box's health items; none when its dirs hold no health.json, one SKIP (H0) when the
    health.json holds no samples (no NVIDIA GPU/driver where it ran)."""
    t = th["health"]
    docs = read_docs(getattr(ev, "dirs", ()))
    if not docs:
        return []
    samples = _samples(docs)
    if not samples:
        why = next((d["not_judged"] for d in docs if d.get("not_judged")), "no health.json")
        return [Item("H0", "GPU health", "SKIP", why, "ECC, throttling, NVLink/PCIe errors, fabric manager",
                     t["source"], NO_HEALTH_HINT)]
    gpus = _by_gpu(samples)
    return [item_ecc(gpus, t), item_memory_retire(gpus, t), item_throttle(gpus, t), item_temperature(gpus, t),
            item_nvlink_errors(gpus, t), item_pcie_health(gpus, t), item_fabric(gpus, t), item_modes(gpus, t)]
