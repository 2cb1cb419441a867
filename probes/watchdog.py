# rentwatch-probe: watchdog
"""The dead-man's switch, run ON the rented host and left running there.

If the controller's heartbeat file goes stale past the window, the instance stops itself through
the marketplace API with the container-scoped key the platform injects (CONTAINER_API_KEY,
CONTAINER_ID); the account's key is never on the host. A stand-down file ends it quietly.
Standalone (stdlib only), Python 3.8+.

While it runs it also keeps an NVML event set open (libnvidia-ml through ctypes) and appends
every XID and double-bit ECC event to `xid.jsonl` beside the heartbeat, so the NVML sampler
(`--xid-log`) reports XIDs that happened between two samples, while jobs run.
"""

import argparse
import ctypes
import json
import os
import sys
import threading
import time
import urllib.request

EVENT_XID = 0x8
EVENT_DOUBLE_BIT_ECC = 0x2
NVML_ERROR_GPU_IS_LOST = 15


class _EventData(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("eventType", ctypes.c_ulonglong),
        ("eventData", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def watch_xids(path, log, lib=None, rounds=None, wait_ms=1000):
    """Append XID/ECC events to `path` as JSON lines until the process ends (or `rounds`
    waits, in tests). No NVML, no event sets, a lost GPU: logged once, never raised."""
    try:
        lib = lib or ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            log("xid watch: NVML init failed")
            return
        count = ctypes.c_uint()
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return
        es = ctypes.c_void_p()
        if lib.nvmlEventSetCreate(ctypes.byref(es)) != 0:
            log("xid watch: event sets not supported")
            return
        for i in range(count.value):
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h)) != 0:
                continue
            for mask in (EVENT_XID | EVENT_DOUBLE_BIT_ECC, EVENT_XID):
                if lib.nvmlDeviceRegisterEvents(h, ctypes.c_ulonglong(mask), es) == 0:
                    break
        wait = getattr(lib, "nvmlEventSetWait_v2", None) or lib.nvmlEventSetWait
        n = 0
        while rounds is None or n < rounds:
            n += 1
            data = _EventData()
            rc = wait(es, ctypes.byref(data), ctypes.c_uint(wait_ms))
            if rc == NVML_ERROR_GPU_IS_LOST:
                _append(path, {"t": time.time(), "type": "gpu_lost", "xid": 79})
                log("xid watch: GPU is lost")
                return
            if rc != 0:
                continue  # a timeout: nothing happened
            is_xid = bool(data.eventType & EVENT_XID)
            _append(
                path,
                {
                    "t": time.time(),
                    "type": "xid" if is_xid else "double_bit_ecc",
                    "xid": int(data.eventData) if is_xid else None,
                },
            )
    except Exception as exc:  # no NVML in this container, an old driver: the watchdog goes on
        log("xid watch off: %s" % exc)


def _append(path, event):
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def _read_env_file(path, wanted, env):
    """Fill what `env` lacks from a file of K=V entries: /etc/environment (lines, as Vast's
    onstart recipe `env >> /etc/environment` writes it) or /proc/1/environ (NUL-separated)."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return
    for item in data.replace(b"\0", b"\n").split(b"\n"):
        line = item.decode(errors="replace").strip()
        if line.startswith("export "):
            line = line[7:].strip()
        k, _, v = line.partition("=")
        v = v.strip().strip("'\"")
        if k in wanted and not env.get(k) and v:
            env[k] = v


ENV_FILES = ("/etc/environment", "/proc/1/environ")


def container_env(files=()):
    """The container's variables: this process's environment, else the files given, in order
    (an SSH session sees them only on Vast's own images: vast-ai/docs docker-environment)."""
    wanted = ("CONTAINER_ID", "CONTAINER_API_KEY", "VAST_URL")
    env = {k: os.environ.get(k) for k in wanted}
    for path in files:
        if env["CONTAINER_ID"] and env["CONTAINER_API_KEY"]:
            break
        _read_env_file(path, wanted, env)
    return env


def stop_self(env, log):
    base = (env.get("VAST_URL") or "https://console.vast.ai").rstrip("/")
    req = urllib.request.Request(
        "%s/api/v0/instances/%s/" % (base, env["CONTAINER_ID"]),
        data=json.dumps({"state": "stopped"}).encode(),
        method="PUT",
        headers={
            "Authorization": "Bearer " + env["CONTAINER_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    for attempt in range(5):
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                log("stop requested: %s" % r.read(200).decode(errors="replace"))
                return True
        except Exception as exc:
            log("stop failed (%s), retrying" % exc)
            time.sleep(2**attempt)
    return False


SIM_CLOCK_ENV = "RENTWATCH_SIM_CLOCK"


def sim_clock(path):
    """On a simulated host, the market's time (epoch seconds) from the file the simulator keeps
    it in: its clock runs at a scale that may bend or stand (a referee's pacing), so a window
    of market seconds is judged in market seconds, not in wall seconds over the scale it was
    armed at. An unreadable file reads as the last time read: time that cannot be seen to pass
    never stops a host."""
    last = [None]

    def now():
        try:
            with open(path) as f:
                last[0] = float(f.read(64))
        except (OSError, ValueError):
            pass
        return last[0]

    return now


def silence_watch(beat, stand_down, window, check_s, log, now=None, sleep=time.sleep, rounds=None):
    """Watch the heartbeat file until it has been silent for `window` or a stand-down file
    appears: "silent" or "stand-down" ("watching" after `rounds` checks, in tests). With no
    `now`, silence is wall time since the file was touched (a real host, where wall time is
    market time); with a market clock (`sim_clock`), it is market time since a touch was first
    seen, to within one check."""
    seen_mtime, beat_at = None, None
    n = 0
    while rounds is None or n < rounds:
        n += 1
        if os.path.exists(stand_down):
            return "stand-down"
        try:
            mtime = os.path.getmtime(beat)
        except OSError:
            mtime = None
        if now is None:
            silent = window + 1 if mtime is None else time.time() - mtime
        else:
            t = now()
            if mtime != seen_mtime or beat_at is None:
                seen_mtime, beat_at = mtime, t
            silent = 0.0 if t is None or beat_at is None else t - beat_at
        if silent > window:
            log("heartbeat silent for %.0f s: stopping the instance" % silent)
            return "silent"
        sleep(check_s)
    return "watching"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="watchdog")
    ap.add_argument("--dir", default=os.path.expanduser("~/.rentwatch"))
    ap.add_argument(
        "--window-s", type=float, default=900.0, help="heartbeat silence that stops the instance"
    )
    ap.add_argument(
        "--scale", type=float, default=1.0, help="market seconds per wall second (simulator)"
    )
    ap.add_argument("--check-s", type=float, default=15.0)
    ap.add_argument(
        "--env-file",
        action="append",
        default=None,
        help="where the container's variables are when this session lacks them (repeatable; "
        "default /etc/environment, then /proc/1/environ)",
    )
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    beat = os.path.join(args.dir, "heartbeat")
    stand_down = os.path.join(args.dir, "standdown")
    logf = open(os.path.join(args.dir, "watchdog.log"), "a")

    def log(msg):
        logf.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), msg))
        logf.flush()

    env = container_env(args.env_file or ENV_FILES)
    if not (env["CONTAINER_ID"] and env["CONTAINER_API_KEY"]):
        log("no CONTAINER_ID/CONTAINER_API_KEY: cannot stop this instance, exiting")
        return 2
    clock_file = os.environ.get(SIM_CLOCK_ENV)
    now = sim_clock(clock_file) if clock_file else None
    # in market seconds on a simulated host's market clock, else in wall seconds
    window = args.window_s if now else args.window_s / max(args.scale, 1e-9)
    check = max(0.05, args.check_s / max(args.scale, 1e-9))
    if not os.path.exists(beat):
        open(beat, "a").close()
    log("armed: window %.0f market-s" % args.window_s)
    threading.Thread(
        target=watch_xids, args=(os.path.join(args.dir, "xid.jsonl"), log), daemon=True
    ).start()
    if silence_watch(beat, stand_down, window, check, log, now) == "stand-down":
        log("stand-down: exiting")
        return 0
    stop_self(env, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
