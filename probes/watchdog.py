# rentwatch-probe: watchdog
"""The dead-man's switch, run ON the rented host and left running there.

If the controller's heartbeat file goes stale past the window, the instance stops itself through
the marketplace API with the container-scoped key the platform injects (CONTAINER_API_KEY,
CONTAINER_ID); the account's key is never on the host. A stand-down file ends it quietly.
Standalone (stdlib only), Python 3.8+.
"""

import argparse
import json
import os
import sys
import time
import urllib.request


def container_env():
    env = {k: os.environ.get(k) for k in ("CONTAINER_ID", "CONTAINER_API_KEY", "VAST_URL")}
    if not (env["CONTAINER_ID"] and env["CONTAINER_API_KEY"]):
        try:  # SSH sessions may lack the container's variables; PID 1 has them
            with open("/proc/1/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    k, _, v = item.decode(errors="replace").partition("=")
                    if k in env and not env[k]:
                        env[k] = v
        except OSError:
            pass
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
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    beat = os.path.join(args.dir, "heartbeat")
    stand_down = os.path.join(args.dir, "standdown")
    logf = open(os.path.join(args.dir, "watchdog.log"), "a")

    def log(msg):
        logf.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), msg))
        logf.flush()

    env = container_env()
    if not (env["CONTAINER_ID"] and env["CONTAINER_API_KEY"]):
        log("no CONTAINER_ID/CONTAINER_API_KEY: cannot stop this instance, exiting")
        return 2
    window = args.window_s / max(args.scale, 1e-9)
    check = max(0.05, args.check_s / max(args.scale, 1e-9))
    if not os.path.exists(beat):
        open(beat, "a").close()
    log("armed: window %.0f market-s" % args.window_s)
    while True:
        if os.path.exists(stand_down):
            log("stand-down: exiting")
            return 0
        try:
            silent = time.time() - os.path.getmtime(beat)
        except OSError:
            silent = window + 1
        if silent > window:
            log("heartbeat silent for %.0f s: stopping the instance" % silent)
            stop_self(env, log)
            return 0
        time.sleep(check)


if __name__ == "__main__":
    sys.exit(main())
