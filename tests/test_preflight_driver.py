"""The torch-free preflight: its host-side logic (PTX text, argument packing, checking, the
document) run on the CPU against a stand-in for libcuda that reads the packed kernel
arguments from real memory and computes what the PTX kernels compute. The GPU path itself
runs where a GPU is lent (docs/benchmarks.md)."""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from rentwatch.core.preflight.verdict import preflight_verdict
from rentwatch.engine.hosts.probe_io import parse_probe_output, probe_source

PROBES = Path(__file__).resolve().parent.parent / "probes"
sys.path.insert(0, str(PROBES))
import preflight  # noqa: E402


def _v(x):
    """The value behind a ctypes argument as the real library would read it."""
    if hasattr(x, "_obj"):  # ctypes.byref(...)
        return x._obj
    if isinstance(x, ctypes._SimpleCData):
        return x.value
    return x


def _kernel_params(ptx: str) -> dict[str, list[str]]:
    out = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx):
        out[m.group(1)] = re.findall(r"\.param\s+\.(\w+)", m.group(2))
    return out


class FakeCuda:
    """libcuda's calls the probe makes, on host memory. `lie` corrupts one product entry."""

    def __init__(self, lie: bool = False, total_mb: int = 24564, free_mb: int = 24000):
        self.lie = lie
        self.buffers: dict[int, ctypes.Array] = {}
        self.kernels: dict[str, list[str]] = {}
        self.launches: list[str] = []
        self.total, self.free_ = total_mb * 2**20, free_mb * 2**20
        self.allocated = 0

    def cuGetErrorName(self, rc, out):
        _v(out).value = b"CUDA_ERROR_FAKE"
        return 0

    def cuInit(self, flags):
        return 0

    def cuDeviceGet(self, dev, i):
        _v(dev).value = _v(i)
        return 0

    def cuDevicePrimaryCtxRetain(self, ctx, dev):
        _v(ctx).value = 0x1234
        return 0

    def cuCtxSetCurrent(self, ctx):
        return 0

    def cuDeviceGetName(self, buf, n, dev):
        buf.value = b"NVIDIA GeForce RTX 4090"
        return 0

    def cuDeviceTotalMem_v2(self, out, dev):
        _v(out).value = self.total
        return 0

    def cuDeviceGetAttribute(self, out, attr, dev):
        _v(out).value = {75: 8, 76: 9}[_v(attr)]
        return 0

    def cuDriverGetVersion(self, out):
        _v(out).value = 12040
        return 0

    def cuModuleLoadData(self, module, image):
        text = _v(image).decode()
        self.kernels = _kernel_params(text)
        _v(module).value = 0x99
        return 0

    def cuModuleGetFunction(self, fn, module, name):
        if name.decode() not in self.kernels:
            return 500  # CUDA_ERROR_NOT_FOUND
        _v(fn).value = 0x100 + list(self.kernels).index(name.decode())
        return 0

    def cuMemAlloc_v2(self, ptr, size):
        size = _v(size)
        if self.allocated + size > self.free_:
            return 2  # out of memory
        buf = (ctypes.c_char * size)()
        addr = ctypes.addressof(buf)
        self.buffers[addr] = buf
        self.allocated += size
        _v(ptr).value = addr
        return 0

    def cuMemFree_v2(self, ptr):
        buf = self.buffers.pop(_v(ptr))
        self.allocated -= len(buf)
        return 0

    def cuMemGetInfo_v2(self, free, total):
        _v(free).value, _v(total).value = self.free_ - self.allocated, self.total
        return 0

    def cuMemsetD32_v2(self, ptr, value, count):
        assert _v(ptr) in self.buffers and _v(count) * 4 <= len(self.buffers[_v(ptr)])
        return 0

    def cuMemAllocHost_v2(self, out, size):
        buf = (ctypes.c_char * _v(size))()
        self.buffers[ctypes.addressof(buf)] = buf
        _v(out).value = ctypes.addressof(buf)
        return 0

    def cuMemFreeHost(self, ptr):
        self.buffers.pop(_v(ptr))
        return 0

    def cuMemcpyHtoD_v2(self, dst, src, size):
        ctypes.memmove(_v(dst), _v(src), _v(size))
        return 0

    def cuMemcpyDtoH_v2(self, dst, src, size):
        ctypes.memmove(dst, _v(src), _v(size))
        return 0

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shm, stream, params, extra):
        name = list(self.kernels)[_v(fn) - 0x100]
        kinds = self.kernels[name]
        ctype = {"u64": ctypes.c_uint64, "u32": ctypes.c_uint32}
        args = [
            ctypes.cast(params[i], ctypes.POINTER(ctype[k])).contents.value
            for i, k in enumerate(kinds)
        ]
        threads = _v(gx) * _v(bx) * (_v(gy) * _v(by))
        getattr(self, "_" + name)(*args, threads=threads)
        self.launches.append(name)
        return 0

    def _fill(self, a, b, n, threads):
        assert threads >= n * n
        fa = (ctypes.c_float * (n * n)).from_address(a)
        fb = (ctypes.c_float * (n * n)).from_address(b)
        for r in range(n):
            for c in range(n):
                fa[r * n + c] = (r + c) % 7 - 3
                fb[r * n + c] = (r + 2 * c) % 5 - 2

    def _mm(self, a, b, c, n, threads):
        assert threads >= n * n
        fa = (ctypes.c_float * (n * n)).from_address(a)
        fb = (ctypes.c_float * (n * n)).from_address(b)
        fc = (ctypes.c_float * (n * n)).from_address(c)
        for r in range(n):
            for j in range(n):
                fc[r * n + j] = sum(fa[r * n + k] * fb[k * n + j] for k in range(n))
        if self.lie:
            fc[(n // 2) * n + n // 2] += 1.0

    def cuCtxSynchronize(self):
        return 0

    def cuEventCreate(self, ev, flags):
        _v(ev).value = 0x77
        return 0

    def cuEventRecord(self, ev, stream):
        return 0

    def cuEventSynchronize(self, ev):
        return 0

    def cuEventElapsedTime(self, ms, a, b):
        _v(ms).value = 2.5
        return 0


def test_ptx_declares_the_kernels_the_probe_launches_with_their_arity():
    params = _kernel_params(preflight.PTX)
    assert params == {"fill": ["u64", "u64", "u32"], "mm": ["u64", "u64", "u64", "u32"]}
    assert ".target sm_50" in preflight.PTX and ".address_size 64" in preflight.PTX


def test_pack_args_points_at_each_value():
    arr, keep = preflight.pack_args(ctypes.c_uint64(2**40 + 5), ctypes.c_uint32(77))
    assert ctypes.cast(arr[0], ctypes.POINTER(ctypes.c_uint64)).contents.value == 2**40 + 5
    assert ctypes.cast(arr[1], ctypes.POINTER(ctypes.c_uint32)).contents.value == 77
    assert len(keep) == 2


def test_driver_path_computes_checks_and_documents():
    fake = FakeCuda()
    doc = preflight.run_driver(24, 3, preflight.Driver(fake))
    assert doc["backend"] == "driver" and doc["ok"] is True, doc
    assert fake.launches == ["fill", "mm", "mm", "mm", "mm"]  # warm-up, then 3 timed
    mm = doc["matmul"]
    assert mm["result_ok"] and mm["dtype"] == "float32" and mm["max_rel_err"] == 0.0
    assert mm["tflops"] == pytest.approx(2 * 24**3 * 3 / 0.0025 / 1e12)
    assert doc["device"]["name"] == "NVIDIA GeForce RTX 4090"
    assert doc["device"]["cuda_version"] == "12.4" and doc["device"]["capability"] == "8.9"
    assert not fake.buffers  # everything freed
    # the same validator and verdict as the torch document
    raw = (preflight.json.dumps(doc) + "\n").encode()
    parsed = parse_probe_output(raw, "preflight")
    assert preflight_verdict(parsed, "RTX 4090", 0.6).failure_class == "too_slow"  # tiny n


def test_driver_path_catches_a_wrong_product():
    doc = preflight.run_driver(24, 1, preflight.Driver(FakeCuda(lie=True)))
    assert doc["ok"] is False and doc["error"]["type"] == "WrongResult"
    assert doc["matmul"]["result_ok"] is False


def test_driver_errors_are_named_and_missing_functions_typed():
    fake = FakeCuda()
    fake.cuModuleLoadData = lambda m, i: 218  # CUDA_ERROR_INVALID_PTX
    doc = preflight.run_driver(8, 1, preflight.Driver(fake))
    assert doc["ok"] is False and doc["error"]["type"] == "CudaError"
    assert "cuModuleLoadData failed: CUDA_ERROR_FAKE (218)" in doc["error"]["message"]
    old = FakeCuda()
    old.cuDeviceTotalMem_v2 = None  # an old driver without the _v2 entry point
    doc = preflight.run_driver(8, 1, preflight.Driver(old))
    assert doc["error"]["type"] == "CudaError" and "not in this driver" in doc["error"]["message"]


def test_no_libcuda_is_a_typed_failure(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(preflight.ctypes, "CDLL", missing)
    doc = preflight.run_driver(8, 1)
    assert doc["ok"] is False and doc["error"]["type"] == "CudaError"
    assert "libcuda not found" in doc["error"]["message"]


def test_reference_matches_the_closed_form_inputs():
    n = 10
    a = [[(r + k) % 7 - 3 for k in range(n)] for r in range(n)]
    b = [[(k + 2 * c) % 5 - 2 for c in range(n)] for k in range(n)]
    for r, c in ((0, 0), (3, 7), (9, 9)):
        assert preflight.reference_entry(n, r, c) == sum(a[r][k] * b[k][c] for k in range(n))
    assert preflight.check_rows({0: [float("nan")] * n}, n, [0]) == float("inf")


def test_vram_and_pcie_sections_on_the_fake():
    fake = FakeCuda(free_mb=3000)
    cu = preflight.Driver(fake)
    vram = preflight.vram_section(cu, chunk_mb=512, reserve_mb=256)
    assert vram["allocated_mb"] == 3000 - 256 and not fake.buffers
    nvml = types.SimpleNamespace(
        link=lambda: {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16}
    )
    pcie = preflight.pcie_section(cu, nvml, mb=4)
    assert pcie["h2d_gbps"] == pytest.approx(2 * 4 * 2**20 / 0.0025 / 1e9, rel=1e-3)
    assert pcie["width"] == 16 and not fake.buffers


def test_disk_section_measures_a_real_write(tmp_path):
    d = preflight.disk_section(str(tmp_path), 4)
    assert d["free_gb"] > 0 and d["write_mb_s"] > 0 and d["written_mb"] == 4
    assert list(tmp_path.iterdir()) == []  # nothing left behind


class FakeNvmlLib:
    """libnvidia-ml's C calls: one XID 79 waiting in the event set; max width unsupported."""

    def __init__(self, events=((0x8, 79),), lost=False):
        self.events = list(events)
        self.lost = lost

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, h):
        _v(h).value = 0x42
        return 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h, out):
        if self.lost:
            return 15
        _v(out).value = 3
        return 0

    def nvmlDeviceGetCurrPcieLinkWidth(self, h, out):
        _v(out).value = 1
        return 0

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h, out):
        _v(out).value = 4
        return 0

    def nvmlDeviceGetMaxPcieLinkWidth(self, h, out):
        return 3  # NVML_ERROR_NOT_SUPPORTED

    def nvmlEventSetCreate(self, es):
        _v(es).value = 0x55
        return 0

    def nvmlDeviceRegisterEvents(self, h, mask, es):
        return 0

    def nvmlEventSetWait_v2(self, es, data, timeout):
        if not self.events:
            return 10  # timeout
        kind, xid = self.events.pop(0)
        d = _v(data)
        d.eventType, d.eventData = kind, xid
        return 0


def test_nvml_through_ctypes_link_events_and_a_lost_gpu():
    nv = preflight.Nvml(FakeNvmlLib())
    nv.watch()
    assert nv.link() == {"gen": 3, "width": 1, "max_gen": 4, "max_width": None}
    sec = nv.xid_section()
    assert sec == {"supported": True, "events": [{"type": "xid", "xid": 79}], "gpu_lost": False}
    lost = preflight.Nvml(FakeNvmlLib(events=(), lost=True))
    lost.link()
    assert lost.xid_section()["gpu_lost"] is True
    old = FakeNvmlLib()
    old.nvmlEventSetWait_v2 = None  # an old driver: the wait entry point is missing
    nv = preflight.Nvml(old)
    nv.watch()
    assert nv.xid_section()["events"] == []
    assert preflight.Nvml(types.SimpleNamespace()).link()["width"] is None  # no init at all


def test_without_torch_the_probe_falls_back_to_the_driver_path():
    """Run as the host runs it (`python3 -`), in an interpreter that cannot import torch and
    has no libcuda: the document says driver backend and a typed error, never a traceback."""
    code = (
        "import sys, runpy; sys.modules['torch'] = None; sys.argv = ['-', '--n', '8', "
        "'--iters', '1', '--disk-mb', '-1', '--pcie-mb', '0', '--no-vram']\n"
        "src = sys.stdin.read(); exec(compile(src, 'preflight', 'exec'), {'__name__': '__main__'})"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=probe_source("preflight"),
        capture_output=True,
        timeout=60,
    )
    doc = parse_probe_output(out.stdout, "preflight")
    assert doc["backend"] == "driver" and doc["ok"] is False
    assert doc["error"]["type"] == "CudaError", doc
