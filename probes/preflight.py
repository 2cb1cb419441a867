# rentwatch-probe: preflight
"""Compute preflight, run ON the rented host: does this GPU really compute, and how fast?

Standalone (stdlib + torch), Python 3.8+. Sent over SSH on stdin (`python3 - [args]`), leaves
nothing behind, prints one JSON document. Verdict thresholds live in the controller, not here.

Checks: CUDA init, device facts, a bf16 matmul of deterministic inputs whose exact product is
known in closed form (so a card that returns garbage fails), then timed iterations with CUDA
events after a warm-up. `--device cpu` runs the same path on the CPU (tests, no GPU).
"""

import argparse
import json
import sys
import time

SCHEMA = 1


def _inputs(torch, n, device):
    # A[i,k] = ((i + k) % 7 - 3) and B[k,j] = ((k + 2 j) % 5 - 2): small integers, exact in bf16,
    # and every product sum is an integer well inside bf16's exact range for fp32 accumulation.
    i = torch.arange(n, device=device).view(-1, 1)
    k = torch.arange(n, device=device).view(1, -1)
    a = ((i + k) % 7 - 3).to(torch.bfloat16)
    kk = torch.arange(n, device=device).view(-1, 1)
    j = torch.arange(n, device=device).view(1, -1)
    b = ((kk + 2 * j) % 5 - 2).to(torch.bfloat16)
    return a, b


def _reference_rows(n, rows):
    # The exact product for a few rows, computed independently of torch, in plain Python.
    colsum = {}
    out = []
    for r in rows:
        arow = [((r + k) % 7 - 3) for k in range(n)]
        vals = []
        for c in (0, 1, n // 2, n - 1):
            key = c
            if key not in colsum:
                colsum[key] = [((k + 2 * c) % 5 - 2) for k in range(n)]
            bcol = colsum[key]
            vals.append(float(sum(x * y for x, y in zip(arow, bcol))))
        out.append(vals)
    return out


def run(n, iters, device_kind):
    steps = {}
    t0 = time.perf_counter()
    result = {"schema": SCHEMA, "probe": "preflight", "ok": False, "device": None, "error": None}
    try:
        import torch
    except Exception as exc:  # an image without torch is a failed preflight, not a crash
        result["error"] = {"type": type(exc).__name__, "message": str(exc)[:500]}
        return result
    try:
        t = time.perf_counter()
        if device_kind == "cuda":
            torch.cuda.init()
            dev = torch.device("cuda", 0)
            props = torch.cuda.get_device_properties(0)
            device = {
                "name": torch.cuda.get_device_name(0),
                "cuda_version": torch.version.cuda,
                "driver_version": _driver_version(),
                "total_memory_mb": int(props.total_memory // 2**20),
                "capability": "%d.%d" % (props.major, props.minor),
            }
        else:
            dev = torch.device("cpu")
            device = {
                "name": "cpu",
                "cuda_version": None,
                "driver_version": None,
                "total_memory_mb": None,
            }
        result["device"] = device
        steps["cuda_init_s"] = time.perf_counter() - t

        t = time.perf_counter()
        a, b = _inputs(torch, n, dev)
        _sync(torch, device_kind)
        steps["alloc_s"] = time.perf_counter() - t

        t = time.perf_counter()
        c = a @ b
        _sync(torch, device_kind)
        steps["warmup_s"] = time.perf_counter() - t

        t = time.perf_counter()
        if device_kind == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                c = a @ b
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1000.0
        else:
            for _ in range(iters):
                c = a @ b
            seconds = time.perf_counter() - t
        steps["timed_s"] = time.perf_counter() - t

        t = time.perf_counter()
        rows = (0, 1, n // 2, n - 1)
        got = c[list(rows)][:, [0, 1, n // 2, n - 1]].float().cpu().tolist()
        ref = _reference_rows(n, rows)
        err = 0.0
        for gr, rr in zip(got, ref):
            for g, r in zip(gr, rr):
                err = max(err, abs(g - r) / max(1.0, abs(r)))
        finite = bool(torch.isfinite(c.float()).all().item())
        steps["check_s"] = time.perf_counter() - t
        tflops = 2.0 * n**3 * iters / max(seconds, 1e-12) / 1e12
        ok = finite and err <= 0.02  # bf16 output rounding stays well inside 2%
        result["matmul"] = {
            "n": n,
            "dtype": "bfloat16",
            "iters": iters,
            "seconds": seconds,
            "tflops": tflops,
            "max_rel_err": err,
            "result_ok": ok,
        }
        result["ok"] = ok
        if not ok:
            result["error"] = {
                "type": "WrongResult",
                "message": "matmul result differs from the exact product",
            }
    except Exception as exc:
        result["error"] = {"type": type(exc).__name__, "message": str(exc)[:500]}
    result["steps"] = {k: round(v, 4) for k, v in steps.items()}
    result["total_s"] = round(time.perf_counter() - t0, 4)
    return result


def _sync(torch, device_kind):
    if device_kind == "cuda":
        torch.cuda.synchronize()


def _driver_version():
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="preflight")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args(argv)
    print(json.dumps(run(args.n, args.iters, args.device)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
