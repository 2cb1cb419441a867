# rentwatch-probe: nvml_sample
"""GPU readings through NVML, run ON the rented host: one sample, or a stream of JSON lines.

Standalone (stdlib + pynvml from nvidia-ml-py), Python 3.8+. A function an old driver lacks
gives null for its fields, never a crash.

Each sample carries the GPU's vital signs as nvitop shows them: memory used and total (MiB),
temperature (C), power draw and its enforced limit (W), fan (%), and ECC error and retired-page
counts. A reading the card does not have (NVML's NotSupported, common on consumer cards) is
null, never 0: absent is not healthy.

With `--events-ms N` it also registers an NVML event set for XID and double-bit ECC events and
reports what arrives (waiting up to N ms) in an `xid` section; a GPU that NVML reports lost
(XID 79, fallen off the bus) sets `xid.gpu_lost`.
"""

import argparse
import json
import os
import sys
import time

SCHEMA = 1

# NVML clock event (throttle) reason bits and the names rentwatch uses for them.
REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def decode_reasons(bits):
    if bits is None:
        return None
    return [name for bit, name in REASONS if bits & bit]


NVML_ERROR_GPU_IS_LOST = 15
EVENT_XID = 0x8
EVENT_DOUBLE_BIT_ECC = 0x2
_lost = []  # set once a call answered "GPU is lost"


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # NVMLError_NotSupported, a missing function on an old driver, ...
        if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST:
            _lost.append(True)
        return None


def watch_events(nv, handles):
    """An event set for XID and double-bit ECC on every GPU; None where unsupported."""
    create = getattr(nv, "nvmlEventSetCreate", None)
    register = getattr(nv, "nvmlDeviceRegisterEvents", None)
    if create is None or register is None:
        return None
    es = _try(create)
    if es is None:
        return None
    done = 0
    for h in handles:
        for mask in (EVENT_XID | EVENT_DOUBLE_BIT_ECC, EVENT_XID):
            try:
                register(h, mask, es)
                done += 1
                break
            except Exception as exc:
                if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST:
                    _lost.append(True)
    return es if done else None


def drain_events(nv, es, wait_ms):
    """Events the set holds, waiting up to `wait_ms` for the first one."""
    events = []
    wait = getattr(nv, "nvmlEventSetWait_v2", None) or getattr(nv, "nvmlEventSetWait", None)
    if es is None or wait is None:
        return events
    for _ in range(64):
        try:
            data = wait(es, int(wait_ms))
        except Exception:  # NVMLError_Timeout: nothing (more) happened
            break
        kind = getattr(data, "eventType", 0)
        is_xid = bool(kind & EVENT_XID) if isinstance(kind, int) else False
        xid = getattr(data, "eventData", None)
        events.append(
            {
                "type": "xid" if is_xid else "double_bit_ecc",
                "xid": int(xid) if is_xid and isinstance(xid, int) else None,
            }
        )
        wait_ms = 0
    return events


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def _mib(v):
    return v // 2**20 if isinstance(v, int) else None


def retired_pages(nv, handle):
    """Pages the driver retired for ECC errors (both causes), or None where the board retires
    none: consumer cards without ECC, and Ampere and later, which remap rows instead."""
    fn = getattr(nv, "nvmlDeviceGetRetiredPages", None)
    if fn is None:
        return None
    causes = (
        getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
        getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
    )
    pages = [_try(fn, handle, cause) for cause in causes]
    if any(p is None for p in pages):
        return None
    return sum(len(p) for p in pages)


def sample(nv, handle, index):
    util = _try(nv.nvmlDeviceGetUtilizationRates, handle)
    mem = _try(nv.nvmlDeviceGetMemoryInfo, handle)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    bits = _try(reasons_fn, handle) if reasons_fn else None
    sm_type = getattr(nv, "NVML_CLOCK_SM", 1)
    power = _try(nv.nvmlDeviceGetPowerUsage, handle)
    limit = _try(nv.nvmlDeviceGetEnforcedPowerLimit, handle)
    temp_sensor = getattr(nv, "NVML_TEMPERATURE_GPU", 0)
    ecc_corr = getattr(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    ecc_unc = getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile = getattr(nv, "NVML_VOLATILE_ECC", 0)
    return {
        "t": time.time(),
        "index": index,
        "name": _text(_try(nv.nvmlDeviceGetName, handle)),
        "util": getattr(util, "gpu", None),
        "mem_util": getattr(util, "memory", None),
        "mem_used_mb": _mib(getattr(mem, "used", None)),
        "mem_total_mb": _mib(getattr(mem, "total", None)),
        "sm_clock": _try(nv.nvmlDeviceGetClockInfo, handle, sm_type),
        "max_sm_clock": _try(nv.nvmlDeviceGetMaxClockInfo, handle, sm_type),
        "reasons_bits": bits,
        "reasons": decode_reasons(bits),
        "temp": _try(nv.nvmlDeviceGetTemperature, handle, temp_sensor),
        "power_w": power / 1000.0 if power is not None else None,
        "power_limit_w": limit / 1000.0 if limit is not None else None,
        # percent of the fan's top speed; None on a passively cooled card (NotSupported)
        "fan_pct": _opt(nv, "nvmlDeviceGetFanSpeed", handle),
        "pcie_gen": _try(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_width": _try(nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "pcie_max_gen": _opt(nv, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_max_width": _opt(nv, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        # volatile (since boot) ECC error counts; None on boards without ECC (NotSupported)
        "ecc_uncorrected": _opt(nv, "nvmlDeviceGetTotalEccErrors", handle, ecc_unc, volatile),
        "ecc_corrected": _opt(nv, "nvmlDeviceGetTotalEccErrors", handle, ecc_corr, volatile),
        "retired_pages": retired_pages(nv, handle),
        "driver_version": _text(_try(nv.nvmlSystemGetDriverVersion)),
    }


def read_xid_log(path, keep=50):
    """The last events the watchdog logged (JSON lines); a missing or garbled file is none."""
    if not path:
        return []
    try:
        with open(os.path.expanduser(path), "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines[-keep:]:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and isinstance(ev.get("xid"), (int, type(None))):
            out.append({"type": str(ev.get("type"))[:20], "xid": ev.get("xid")})
    return out


def _opt(nv, name, *args):
    fn = getattr(nv, name, None)
    return _try(fn, *args) if fn is not None else None


def _fail(exc):
    """One failure document: NVML could not be loaded or initialised."""
    print(
        json.dumps(
            {
                "schema": SCHEMA,
                "probe": "nvml_sample",
                "ok": False,
                "error": {"type": type(exc).__name__, "message": str(exc)[:300]},
            }
        )
    )
    return 1


def main(argv=None, nv=None):
    ap = argparse.ArgumentParser(prog="nvml_sample")
    ap.add_argument(
        "--interval", type=float, default=0.0, help="seconds between samples; 0: one sample"
    )
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument(
        "--events-ms", type=int, default=-1, help="watch XID/ECC events, waiting this long; -1: off"
    )
    ap.add_argument("--xid-log", default=None, help="the watchdog's xid.jsonl, reported too")
    args = ap.parse_args(argv)
    del _lost[:]
    if nv is None:
        try:
            import pynvml as nv
        except Exception as exc:
            return _fail(exc)
    try:
        nv.nvmlInit()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    except Exception as exc:
        if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST:
            print(
                json.dumps(
                    {
                        "schema": SCHEMA,
                        "probe": "nvml_sample",
                        "ok": True,
                        "samples": [],
                        "xid": {"supported": None, "events": [], "gpu_lost": True},
                    }
                )
            )
            return 0
        return _fail(exc)
    es = watch_events(nv, handles) if args.events_ms >= 0 else None
    for n in range(max(1, args.count)):
        doc = {
            "schema": SCHEMA,
            "probe": "nvml_sample",
            "ok": True,
            "samples": [sample(nv, h, i) for i, h in enumerate(handles)],
        }
        if args.events_ms >= 0 or args.xid_log:
            logged = read_xid_log(args.xid_log)
            doc["xid"] = {
                "supported": es is not None or bool(logged),
                "events": logged + drain_events(nv, es, max(args.events_ms, 0)),
                "gpu_lost": bool(_lost) or any(e.get("type") == "gpu_lost" for e in logged),
            }
        print(json.dumps(doc))
        sys.stdout.flush()
        if n + 1 < args.count and args.interval > 0:
            time.sleep(args.interval)
    _try(nv.nvmlShutdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
