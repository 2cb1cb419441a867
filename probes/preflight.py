# rentwatch-probe: preflight
"""Compute preflight, run ON the rented host: does this GPU really compute, and how fast?

Standalone (stdlib; torch when the image has it), Python 3.8+. Sent over SSH on stdin
(`python3 - [args]`), leaves nothing behind, prints one JSON document. Verdict thresholds live
in the controller, not here.

Checks: CUDA init, device facts, a matmul of deterministic integer-valued inputs whose exact
product is known in closed form (so a card that returns garbage fails), then timed iterations
with CUDA events after a warm-up. With torch: bf16 (`backend: "torch"`). Without torch: the
CUDA driver API through ctypes (libcuda.so.1, which the NVIDIA container runtime mounts into
every GPU container) runs a small PTX kernel in fp32 (`backend: "driver"`).

Then the deeper checks, each its own section that records an error instead of failing the
document: `pcie` (link width/generation through NVML, pinned host-to-device bandwidth), `vram`
(allocate most of the free memory, touch it, free it), `disk` (free space, fsync'd write speed),
`net` (only with --net-url), `xid` (XID/ECC events an NVML event set caught meanwhile).
`--device cpu` runs the torch path on the CPU (tests, no GPU).
"""

import argparse
import ctypes
import json
import os
import shutil
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


def sample_positions(nonce, n, k=8):
    """The entries of C the controller checks, picked by the nonce it sent with this run (an
    LCG the controller computes too): a document made before the nonce existed cannot name
    them, let alone their values."""
    out = []
    x = nonce % 2**31
    for _ in range(k):
        x = (1103515245 * x + 12345) % 2**31
        r = x % n
        x = (1103515245 * x + 12345) % 2**31
        out.append((r, x % n))
    return out


def run(n, iters, device_kind, backend="auto", cu=None, nonce=None):
    """The matmul part: torch when importable (or asked for), else the driver API. With a
    `nonce`, the document carries the product's entries at the positions it picks."""
    torch = None
    if backend != "driver":
        try:
            import torch
        except Exception as exc:
            if backend == "torch" or device_kind != "cuda":
                return {
                    "schema": SCHEMA,
                    "probe": "preflight",
                    "backend": "torch",
                    "ok": False,
                    "device": None,
                    "error": _err(exc),
                }
    if torch is None:
        return run_driver(n, iters, cu, nonce)
    return _run_torch(torch, n, iters, device_kind, nonce)


def _err(exc):
    return {"type": type(exc).__name__, "message": str(exc)[:500]}


def _run_torch(torch, n, iters, device_kind, nonce=None):
    steps = {}
    t0 = time.perf_counter()
    result = {
        "schema": SCHEMA,
        "probe": "preflight",
        "backend": "torch",
        "ok": False,
        "device": None,
        "error": None,
    }
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
        samples = None
        if nonce is not None:
            at = sample_positions(nonce, n)
            r_idx = torch.tensor([r for r, _ in at], device=c.device)
            c_idx = torch.tensor([q for _, q in at], device=c.device)
            vals = c[r_idx, c_idx].float().cpu().tolist()
            samples = [[r, q, v] for (r, q), v in zip(at, vals)]
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
        if samples is not None:
            result["matmul"].update(nonce=nonce, samples=samples)
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


# -- the driver path: no torch, libcuda through ctypes ------------------------------------------

# fill(A, B, n): A[r,c] = (r + c) % 7 - 3 and B[r,c] = (r + 2c) % 5 - 2, the torch path's inputs.
# mm(A, B, C, n): C = A @ B, one thread per output, fp32 fused multiply-add. Every partial sum is
# an integer under 2^24, so fp32 computes it exactly and the host can demand equality.
PTX = r"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry fill(.param .u64 pa, .param .u64 pb, .param .u32 pn)
{
  .reg .pred %p<2>;
  .reg .b32 %r<16>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [pa];
  ld.param.u64 %rd2, [pb];
  ld.param.u32 %r1, [pn];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  mul.lo.u32 %r6, %r1, %r1;
  setp.ge.u32 %p1, %r5, %r6;
  @%p1 bra FILL_DONE;
  div.u32 %r7, %r5, %r1;
  rem.u32 %r8, %r5, %r1;
  add.u32 %r9, %r7, %r8;
  rem.u32 %r10, %r9, 7;
  cvt.rn.f32.u32 %f1, %r10;
  sub.f32 %f1, %f1, 0f40400000;
  shl.b32 %r11, %r8, 1;
  add.u32 %r12, %r7, %r11;
  rem.u32 %r13, %r12, 5;
  cvt.rn.f32.u32 %f2, %r13;
  sub.f32 %f2, %f2, 0f40000000;
  mul.wide.u32 %rd3, %r5, 4;
  add.u64 %rd4, %rd1, %rd3;
  add.u64 %rd5, %rd2, %rd3;
  st.global.f32 [%rd4], %f1;
  st.global.f32 [%rd5], %f2;
FILL_DONE:
  ret;
}

.visible .entry mm(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 pn)
{
  .reg .pred %p<3>;
  .reg .b32 %r<12>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [pa];
  ld.param.u64 %rd2, [pb];
  ld.param.u64 %rd3, [pc];
  ld.param.u32 %r1, [pn];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  cvta.to.global.u64 %rd3, %rd3;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  mov.u32 %r2, %ctaid.y;
  mov.u32 %r3, %ntid.y;
  mov.u32 %r4, %tid.y;
  mad.lo.u32 %r6, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  setp.ge.or.u32 %p1, %r6, %r1, %p1;
  @%p1 bra MM_DONE;
  mul.lo.u32 %r7, %r6, %r1;
  mul.wide.u32 %rd4, %r7, 4;
  add.u64 %rd5, %rd1, %rd4;
  mul.wide.u32 %rd6, %r5, 4;
  add.u64 %rd7, %rd2, %rd6;
  mul.wide.u32 %rd8, %r1, 4;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r8, 0;
MM_LOOP:
  ld.global.f32 %f2, [%rd5];
  ld.global.f32 %f3, [%rd7];
  fma.rn.f32 %f1, %f2, %f3, %f1;
  add.u64 %rd5, %rd5, 4;
  add.u64 %rd7, %rd7, %rd8;
  add.u32 %r8, %r8, 1;
  setp.lt.u32 %p2, %r8, %r1;
  @%p2 bra MM_LOOP;
  add.u64 %rd9, %rd3, %rd4;
  add.u64 %rd9, %rd9, %rd6;
  st.global.f32 [%rd9], %f1;
MM_DONE:
  ret;
}
"""

MM_BLOCK = 16  # 16 x 16 threads per block for mm
FILL_BLOCK = 256
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CUDA_ERROR_OUT_OF_MEMORY = 2


class CudaError(Exception):
    """A driver API call returned an error code (named as the driver names it)."""


def load_libcuda():
    last = None
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            last = exc
    raise CudaError("libcuda not found (no NVIDIA driver mounted): %s" % last)


def pack_args(*values):
    """The `void **kernelParams` cuLaunchKernel wants: an array of pointers to each argument.
    The argument objects are returned too: they must outlive the launch."""
    holders = list(values)
    array = (ctypes.c_void_p * len(holders))(
        *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders]
    )
    return array, holders


class Driver:
    """The few driver API calls the preflight needs, each checked."""

    def __init__(self, lib):
        self.lib = lib

    def call(self, name, *args):
        fn = getattr(self.lib, name, None)
        if fn is None:
            raise CudaError("%s: not in this driver" % name)
        rc = fn(*args)
        if rc != 0:
            raise CudaError("%s failed: %s" % (name, self.error_name(rc)))

    def error_name(self, rc):
        text = ctypes.c_char_p()
        try:
            if self.lib.cuGetErrorName(rc, ctypes.byref(text)) == 0 and text.value:
                return "%s (%d)" % (text.value.decode(errors="replace"), rc)
        except Exception:
            pass
        return "CUDA error %d" % rc

    def alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        return ptr.value

    def free(self, ptr):
        self.call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def launch(self, fn, grid, block, *args):
        params, keep = pack_args(*args)
        self.call(
            "cuLaunchKernel",
            fn,
            ctypes.c_uint(grid[0]),
            ctypes.c_uint(grid[1]),
            ctypes.c_uint(1),
            ctypes.c_uint(block[0]),
            ctypes.c_uint(block[1]),
            ctypes.c_uint(1),
            ctypes.c_uint(0),
            ctypes.c_void_p(None),
            params,
            ctypes.c_void_p(None),
        )
        del keep

    def event(self):
        ev = ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(ev), ctypes.c_uint(0))
        return ev

    def elapsed_s(self, start, end):
        self.call("cuEventSynchronize", end)
        ms = ctypes.c_float()
        self.call("cuEventElapsedTime", ctypes.byref(ms), start, end)
        return ms.value / 1000.0

    def row(self, ptr, n, r):
        buf = (ctypes.c_float * n)()
        self.call("cuMemcpyDtoH_v2", buf, ctypes.c_uint64(ptr + 4 * r * n), ctypes.c_size_t(4 * n))
        return list(buf)


def reference_entry(n, r, c):
    """C[r, c] of the fill kernel's inputs, exactly, in plain Python."""
    return float(sum(((r + k) % 7 - 3) * ((k + 2 * c) % 5 - 2) for k in range(n)))


def check_rows(rows, n, cols):
    """Largest difference between the device's rows (a dict row -> list) and the exact product
    at the chosen columns; inf when a value is missing or not finite."""
    worst = 0.0
    for r, got in rows.items():
        for c in cols:
            g = got[c] if c < len(got) else float("nan")
            if g != g or g in (float("inf"), float("-inf")):
                return float("inf")
            worst = max(worst, abs(g - reference_entry(n, r, c)))
    return worst


def check_columns(n):
    """Fixed corners and middles plus a spread of columns, so a lane or a tile that lies is
    seen, while the host's reference stays cheap (8 columns x 4 rows x n products)."""
    return sorted({0, 1, n // 3, n // 2, (2 * n) // 3, n - 2, n - 1, (7 * n) // 11} & set(range(n)))


def run_driver(n, iters, cu=None, nonce=None):
    """The matmul through the driver API: same document as torch's, `backend: "driver"`."""
    steps = {}
    t0 = time.perf_counter()
    result = {
        "schema": SCHEMA,
        "probe": "preflight",
        "backend": "driver",
        "ok": False,
        "device": None,
        "error": None,
    }
    try:
        t = time.perf_counter()
        cu = cu or Driver(load_libcuda())
        cu.call("cuInit", ctypes.c_uint(0))
        dev = ctypes.c_int()
        cu.call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(0))
        ctx = ctypes.c_void_p()
        cu.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        cu.call("cuCtxSetCurrent", ctx)
        result["device"] = _driver_device(cu, dev)
        steps["cuda_init_s"] = time.perf_counter() - t

        t = time.perf_counter()
        module, fill, mm = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        cu.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(PTX.encode()))
        cu.call("cuModuleGetFunction", ctypes.byref(fill), module, b"fill")
        cu.call("cuModuleGetFunction", ctypes.byref(mm), module, b"mm")
        size = 4 * n * n
        a, b, c = cu.alloc(size), cu.alloc(size), cu.alloc(size)
        cu.launch(
            fill,
            ((n * n + FILL_BLOCK - 1) // FILL_BLOCK, 1),
            (FILL_BLOCK, 1),
            ctypes.c_uint64(a),
            ctypes.c_uint64(b),
            ctypes.c_uint32(n),
        )
        cu.call("cuCtxSynchronize")
        steps["alloc_s"] = time.perf_counter() - t

        grid = ((n + MM_BLOCK - 1) // MM_BLOCK, (n + MM_BLOCK - 1) // MM_BLOCK)
        args = (ctypes.c_uint64(a), ctypes.c_uint64(b), ctypes.c_uint64(c), ctypes.c_uint32(n))
        t = time.perf_counter()
        cu.launch(mm, grid, (MM_BLOCK, MM_BLOCK), *args)
        cu.call("cuCtxSynchronize")
        steps["warmup_s"] = time.perf_counter() - t

        t = time.perf_counter()
        start, end = cu.event(), cu.event()
        cu.call("cuEventRecord", start, ctypes.c_void_p(None))
        for _ in range(iters):
            cu.launch(mm, grid, (MM_BLOCK, MM_BLOCK), *args)
        cu.call("cuEventRecord", end, ctypes.c_void_p(None))
        seconds = cu.elapsed_s(start, end)
        steps["timed_s"] = time.perf_counter() - t

        t = time.perf_counter()
        cols = check_columns(n)
        rows = {r: cu.row(c, n, r) for r in sorted({0, 1, n // 2, n - 1})}
        err = check_rows(rows, n, cols)
        samples = None
        if nonce is not None:
            at = sample_positions(nonce, n)
            for r in {r for r, _ in at} - set(rows):
                rows[r] = cu.row(c, n, r)
            samples = [[r, q, rows[r][q]] for r, q in at]
        steps["check_s"] = time.perf_counter() - t
        for ptr in (a, b, c):
            cu.free(ptr)
        ok = err == 0.0  # integer sums under 2^24: fp32 is exact, so any difference is a lie
        result["matmul"] = {
            "n": n,
            "dtype": "float32",
            "iters": iters,
            "seconds": seconds,
            "tflops": 2.0 * n**3 * iters / max(seconds, 1e-12) / 1e12,
            "max_rel_err": err if err != float("inf") else None,
            "result_ok": ok,
        }
        if samples is not None:
            result["matmul"].update(nonce=nonce, samples=samples)
        result["ok"] = ok
        if not ok:
            result["error"] = {
                "type": "WrongResult",
                "message": "matmul result differs from the exact product",
            }
    except Exception as exc:
        result["error"] = _err(exc)
    result["steps"] = {k: round(v, 4) for k, v in steps.items()}
    result["total_s"] = round(time.perf_counter() - t0, 4)
    return result


def _driver_device(cu, dev):
    name = ctypes.create_string_buffer(256)
    cu.call("cuDeviceGetName", name, ctypes.c_int(256), dev)
    total = ctypes.c_size_t()
    cu.call("cuDeviceTotalMem_v2", ctypes.byref(total), dev)
    major, minor, version = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    cu.call(
        "cuDeviceGetAttribute",
        ctypes.byref(major),
        ctypes.c_int(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        dev,
    )
    cu.call(
        "cuDeviceGetAttribute",
        ctypes.byref(minor),
        ctypes.c_int(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        dev,
    )
    cu.call("cuDriverGetVersion", ctypes.byref(version))
    return {
        "name": name.value.decode(errors="replace"),
        "cuda_version": "%d.%d" % (version.value // 1000, (version.value % 1000) // 10),
        "driver_version": _driver_version(),
        "total_memory_mb": int(total.value // 2**20),
        "capability": "%d.%d" % (major.value, minor.value),
    }


# -- the deeper checks -----------------------------------------------------------------------

NVML_EVENT_SINGLE_BIT_ECC = 0x1
NVML_EVENT_DOUBLE_BIT_ECC = 0x2
NVML_EVENT_XID = 0x8
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15


class _NvmlEventData(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("eventType", ctypes.c_ulonglong),
        ("eventData", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class Nvml:
    """libnvidia-ml through ctypes (mounted with the driver; pynvml may be absent): the PCIe
    link and an XID/ECC event set. Every call answers None when unsupported, never raises."""

    def __init__(self, lib=None):
        self.lib = lib
        self.handle = None
        self.events = None
        self.lost = False
        self.supported = None
        if lib is None:
            try:
                self.lib = ctypes.CDLL("libnvidia-ml.so.1")
            except OSError:
                return
        if self._rc("nvmlInit_v2") != 0:
            self.lib = None
            return
        h = ctypes.c_void_p()
        if self._rc("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(0), ctypes.byref(h)) == 0:
            self.handle = h

    def _rc(self, name, *args):
        fn = getattr(self.lib, name, None) if self.lib is not None else None
        if fn is None:
            return -1
        try:
            rc = fn(*args)
        except Exception:
            return -1
        if rc == NVML_ERROR_GPU_IS_LOST:
            self.lost = True
        return rc

    def uint(self, name):
        if self.handle is None:
            return None
        v = ctypes.c_uint()
        return v.value if self._rc(name, self.handle, ctypes.byref(v)) == 0 else None

    def link(self):
        return {
            "gen": self.uint("nvmlDeviceGetCurrPcieLinkGeneration"),
            "width": self.uint("nvmlDeviceGetCurrPcieLinkWidth"),
            "max_gen": self.uint("nvmlDeviceGetMaxPcieLinkGeneration"),
            "max_width": self.uint("nvmlDeviceGetMaxPcieLinkWidth"),
        }

    def watch(self):
        """Register for XID and double-bit ECC events (ECC only where the board has it)."""
        if self.handle is None:
            return
        es = ctypes.c_void_p()
        if self._rc("nvmlEventSetCreate", ctypes.byref(es)) != 0:
            self.supported = False
            return
        for mask in (NVML_EVENT_XID | NVML_EVENT_DOUBLE_BIT_ECC, NVML_EVENT_XID):
            if self._rc("nvmlDeviceRegisterEvents", self.handle, ctypes.c_ulonglong(mask), es) == 0:
                self.events, self.supported = es, True
                return
        self.supported = False

    def drain(self, wait_ms=0):
        out = []
        if self.events is None:
            return out
        name = (
            "nvmlEventSetWait_v2"
            if hasattr(self.lib, "nvmlEventSetWait_v2")
            else "nvmlEventSetWait"
        )
        for _ in range(64):
            data = _NvmlEventData()
            if self._rc(name, self.events, ctypes.byref(data), ctypes.c_uint(wait_ms)) != 0:
                break
            kind = "xid" if data.eventType & NVML_EVENT_XID else "double_bit_ecc"
            out.append({"type": kind, "xid": int(data.eventData) if kind == "xid" else None})
            wait_ms = 0
        return out

    def xid_section(self, wait_ms=0):
        events = self.drain(wait_ms)
        return {"supported": self.supported, "events": events, "gpu_lost": self.lost}


def pcie_section(cu, nvml, mb=128):
    """Pinned host-to-device bandwidth, and the link as NVML reads it right after the copy
    (an idle card drops its link generation to save power; under a copy it is up)."""
    host = ctypes.c_void_p()
    nbytes = mb * 2**20
    cu.call("cuMemAllocHost_v2", ctypes.byref(host), ctypes.c_size_t(nbytes))
    dev = cu.alloc(nbytes)
    try:
        cu.call("cuMemcpyHtoD_v2", ctypes.c_uint64(dev), host, ctypes.c_size_t(nbytes))
        start, end = cu.event(), cu.event()
        cu.call("cuEventRecord", start, ctypes.c_void_p(None))
        for _ in range(2):
            cu.call("cuMemcpyHtoD_v2", ctypes.c_uint64(dev), host, ctypes.c_size_t(nbytes))
        cu.call("cuEventRecord", end, ctypes.c_void_p(None))
        seconds = cu.elapsed_s(start, end)
        link = nvml.link() if nvml is not None else {}
    finally:
        cu.free(dev)
        cu.call("cuMemFreeHost", host)
    out = {"h2d_gbps": round(2 * nbytes / max(seconds, 1e-9) / 1e9, 3), "mb": mb}
    out.update(link)
    return out


def vram_section(cu, chunk_mb=1024, reserve_mb=256):
    """Allocate the free memory in chunks (less a reserve), touch every byte, free it."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cu.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    want = max(0, free.value - reserve_mb * 2**20)
    chunk = chunk_mb * 2**20
    held = []
    got = 0
    try:
        while got < want:
            size = min(chunk, want - got)
            try:
                ptr = cu.alloc(size)
            except CudaError:
                if size <= 64 * 2**20:
                    break
                chunk = max(64 * 2**20, chunk // 2)
                continue
            held.append(ptr)
            cu.call(
                "cuMemsetD32_v2",
                ctypes.c_uint64(ptr),
                ctypes.c_uint(0xA5A5A5A5),
                ctypes.c_size_t(size // 4),
            )
            got += size
        cu.call("cuCtxSynchronize")
    finally:
        for ptr in held:
            cu.free(ptr)
    return {
        "total_mb": total.value // 2**20,
        "free_mb": free.value // 2**20,
        "allocated_mb": got // 2**20,
    }


def disk_section(path, mb):
    """Free space where jobs write, and the fsync'd speed of writing `mb` MB there."""
    usage = shutil.disk_usage(path)
    out = {"path": os.path.abspath(path), "free_gb": round(usage.free / 1e9, 2), "write_mb_s": None}
    if mb <= 0:
        return out
    block = os.urandom(2**20)  # incompressible, so a compressing filesystem cannot flatter it
    name = os.path.join(path, ".rentwatch-disk-probe")
    t = time.perf_counter()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(mb):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)
    out["write_mb_s"] = round(mb / max(time.perf_counter() - t, 1e-9), 1)
    out["written_mb"] = mb
    return out


def net_section(url, mb, timeout=20.0):
    """Download up to `mb` MB from `url` and time it (Mb/s, as Vast's inet_down)."""
    import urllib.request

    t = time.perf_counter()
    got = 0
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        while got < mb * 2**20 and time.perf_counter() - t < timeout:
            chunk = resp.read(2**20)
            if not chunk:
                break
            got += len(chunk)
    seconds = max(time.perf_counter() - t, 1e-9)
    return {
        "url": url[:200],
        "mb": round(got / 2**20, 1),
        "mbps": round(got * 8 / seconds / 1e6, 1),
    }


def _section(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # one check that cannot run is recorded, never the whole document
        return {"error": _err(exc)}


def deeper_checks(result, args, cu=None, nvml=None):
    """Add the deeper checks' sections to a GPU preflight document."""
    if args.device != "cuda":
        return result
    t = time.perf_counter()
    if cu is None:
        try:
            cu = Driver(load_libcuda())
            cu.call("cuInit", ctypes.c_uint(0))
            dev = ctypes.c_int()
            cu.call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(0))
            ctx = ctypes.c_void_p()
            cu.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
            cu.call("cuCtxSetCurrent", ctx)
        except Exception as exc:
            cu = None
            result["pcie"] = result["vram"] = {"error": _err(exc)}
    if cu is not None:
        if args.pcie_mb > 0:
            result["pcie"] = _section(pcie_section, cu, nvml, args.pcie_mb)
        if args.vram:
            _free_torch_cache()
            result["vram"] = _section(vram_section, cu)
    if args.disk_mb >= 0:
        result["disk"] = _section(disk_section, args.disk_path, args.disk_mb)
    if args.net_url:
        result["net"] = _section(net_section, args.net_url, args.net_mb)
    if nvml is not None:
        result["xid"] = nvml.xid_section()
    result.setdefault("steps", {})["checks_s"] = round(time.perf_counter() - t, 4)
    return result


def _free_torch_cache():
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass


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
    ap.add_argument("--backend", choices=("auto", "torch", "driver"), default="auto")
    ap.add_argument("--pcie-mb", type=int, default=128, help="0: no bandwidth check")
    ap.add_argument("--no-vram", dest="vram", action="store_false")
    ap.add_argument("--disk-mb", type=int, default=256, help="-1: no disk check; 0: free only")
    ap.add_argument("--disk-path", default=".")
    ap.add_argument("--net-url", default=None, help="time a download from here (off without)")
    ap.add_argument("--net-mb", type=int, default=50)
    ap.add_argument("--nonce", type=int, default=None, help="report C's entries it picks")
    args = ap.parse_args(argv)
    nvml = Nvml() if args.device == "cuda" else None
    if nvml is not None:
        nvml.watch()  # XIDs from here to the end of the checks are caught
    result = run(args.n, args.iters, args.device, args.backend, nonce=args.nonce)
    if result.get("device") is not None:
        result = deeper_checks(result, args, nvml=nvml)
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
