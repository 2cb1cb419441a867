# rentwatch-probe: nvml_sample
"""GPU readings through NVML, run ON the rented host: one sample, or a stream of JSON lines.

Standalone (stdlib + pynvml from nvidia-ml-py), Python 3.8+. A function an old driver lacks
gives null for its fields, never a crash.
"""

import argparse
import json
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


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported, a missing function on an old driver, ...
        return None


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


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
    return {
        "t": time.time(),
        "index": index,
        "name": _text(_try(nv.nvmlDeviceGetName, handle)),
        "util": getattr(util, "gpu", None),
        "mem_util": getattr(util, "memory", None),
        "mem_used_mb": mem.used // 2**20 if mem is not None else None,
        "mem_total_mb": mem.total // 2**20 if mem is not None else None,
        "sm_clock": _try(nv.nvmlDeviceGetClockInfo, handle, sm_type),
        "max_sm_clock": _try(nv.nvmlDeviceGetMaxClockInfo, handle, sm_type),
        "reasons_bits": bits,
        "reasons": decode_reasons(bits),
        "temp": _try(nv.nvmlDeviceGetTemperature, handle, temp_sensor),
        "power_w": power / 1000.0 if power is not None else None,
        "power_limit_w": limit / 1000.0 if limit is not None else None,
        "pcie_gen": _try(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_width": _try(nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "driver_version": _text(_try(nv.nvmlSystemGetDriverVersion)),
    }


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
    args = ap.parse_args(argv)
    if nv is None:
        try:
            import pynvml as nv
        except Exception as exc:
            return _fail(exc)
    try:
        nv.nvmlInit()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    except Exception as exc:
        return _fail(exc)
    for n in range(max(1, args.count)):
        doc = {
            "schema": SCHEMA,
            "probe": "nvml_sample",
            "ok": True,
            "samples": [sample(nv, h, i) for i, h in enumerate(handles)],
        }
        print(json.dumps(doc))
        sys.stdout.flush()
        if n + 1 < args.count and args.interval > 0:
            time.sleep(args.interval)
    _try(nv.nvmlShutdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
