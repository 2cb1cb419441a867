"""The deeper host checks, each a pure function from probe evidence and the offer to a `Check`: the
PCIe link, allocatable VRAM, disk, download speed and XID/ECC under load. `ok=None` (the evidence
could not tell) is recorded and never kills a host; only a measured shortfall does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .gpu_specs import spec_for
from .verdict import CheckPolicy, finite

# Usable bandwidth per lane, GB/s, after line encoding (PCI-SIG: 2.5/5 GT/s 8b/10b, then
# 8/16/32 GT/s 128b/130b); a pinned host-to-device copy reaches ~80% of it in practice.
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
COPY_EFFICIENCY = 0.8

# XIDs that mean the GPU or its memory is broken (NVIDIA's XID catalogue): 48 double-bit ECC,
# 61/62 internal micro-controller halt, 64 ECC page retirement or row remap failure, 74 NVLink,
# 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained/uncontained ECC,
# 119/120 GSP errors. Application faults (13, 31, 43, 45) are the job's, not the host's.
FATAL_XIDS = frozenset({48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120})


@dataclass(frozen=True)
class Check:
    name: str  # pcie, vram, disk, net, xid
    ok: bool | None  # None: could not tell; never a kill
    failure_class: str | None  # narrow_pcie, short_vram, small_disk, slow_disk, slow_net, xid
    reason: str
    measured: float | None = None
    expected: float | None = None


def _num(value: Any) -> float | None:
    """A finite number not negative from a host's document (see `verdict.finite`), or None."""
    number = finite(value)
    return number if number is not None and number >= 0 else None


def _section(doc: Any, key: str) -> Mapping[str, Any] | None:
    sec = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(sec, Mapping) or sec.get("error"):
        return None
    return sec


def _unknown(name: str, why: str) -> Check:
    return Check(name, None, None, why[:200])


def link_gbps(gen: float, width: float) -> float:
    """What a PCIe link of this generation and width should carry host-to-device, GB/s."""
    return LANE_GBPS.get(int(gen), 0.0) * width * COPY_EFFICIENCY


def pcie_check(doc: Any, offer_gpu: str, policy: CheckPolicy) -> Check:
    """The link's width, read under load (an idle card drops its generation, so generation proves
    nothing), and the measured host-to-device bandwidth against the model's full link."""
    sec = _section(doc, "pcie")
    if sec is None:
        return _unknown("pcie", "no PCIe figures from the probe")
    width, max_width = _num(sec.get("width")), _num(sec.get("max_width"))
    gbps = _num(sec.get("h2d_gbps"))
    spec = spec_for(offer_gpu)
    full = link_gbps(spec.pcie_gen, spec.pcie_width) if spec else None
    if width is not None and 0 < width < policy.pcie_min_width:
        top = f" of x{max_width:.0f}" if max_width else ""
        why = f"GPU link runs at x{width:.0f}{top} (a riser?)"
        return Check("pcie", False, "narrow_pcie", why, width, max_width)
    if gbps is not None and full and gbps < policy.pcie_min_bw_share * full:
        why = f"host-to-device copy {gbps:.1f} GB/s, {gbps / full:.0%} of a {offer_gpu}'s "
        return Check("pcie", False, "narrow_pcie", why + f"{full:.0f} GB/s link", gbps, full)
    if gbps is None and width is None:
        return _unknown("pcie", "PCIe width and bandwidth unknown")
    shown = f"{gbps:.1f} GB/s" if gbps is not None else "bandwidth unknown"
    lane = f" x{width:.0f}" if width else ""
    return Check("pcie", True, None, f"PCIe{lane}, {shown}", gbps, full)


def vram_check(doc: Any, offer_gpu_ram_mb: Any, policy: CheckPolicy) -> Check:
    """Memory the probe allocated and touched against the offer's `gpu_ram` (MB)."""
    sec = _section(doc, "vram")
    claimed = _num(offer_gpu_ram_mb)
    if sec is None or claimed is None or claimed <= 0:
        return _unknown("vram", "no allocation figure from the probe, or no gpu_ram in the offer")
    got = _num(sec.get("allocated_mb"))
    if got is None:
        return _unknown("vram", "the probe reported no allocated size")
    if got < policy.vram_min_share * claimed:
        why = f"allocated {got / 1024:.1f} GB of the {claimed / 1024:.1f} GB offered"
        return Check("vram", False, "short_vram", why, got, claimed)
    return Check("vram", True, None, f"{got / 1024:.1f} GB allocatable", got, claimed)


def disk_check(doc: Any, wanted_gb: Any, offer_disk_bw: Any, policy: CheckPolicy) -> Check:
    """Free space against the disk the campaign asked for (the container's disk is its
    allocation), and the fsync'd write speed against the offer's `disk_bw` (MB/s)."""
    sec = _section(doc, "disk")
    if sec is None:
        return _unknown("disk", "no disk figures from the probe")
    free, speed = _num(sec.get("free_gb")), _num(sec.get("write_mb_s"))
    wanted, bw = _num(wanted_gb), _num(offer_disk_bw)
    if free is not None and wanted and free < policy.disk_min_free_share * wanted:
        why = f"{free:.1f} GB free of the {wanted:.0f} GB asked for"
        return Check("disk", False, "small_disk", why, free, wanted)
    if speed is not None and bw and speed < policy.disk_min_write_share * bw:
        why = f"disk writes {speed:.0f} MB/s, {speed / bw:.0%} of the {bw:.0f} MB/s offered"
        return Check("disk", False, "slow_disk", why, speed, bw)
    if free is None and speed is None:
        return _unknown("disk", "disk free space and speed unknown")
    shown = f"{speed:.0f} MB/s" if speed is not None else "speed unknown"
    return Check("disk", True, None, f"disk {shown}", speed, bw)


def net_check(mbps: Any, offer_inet_down: Any, policy: CheckPolicy, source: str = "probe") -> Check:
    """A measured download rate (Mb/s, as Vast's `inet_down` is) against the offer's."""
    got, claimed = _num(mbps), _num(offer_inet_down)
    if got is None or not claimed:
        return _unknown("net", f"no download rate ({source}) or no inet_down in the offer")
    if got < policy.net_min_share * claimed:
        why = f"downloads at {got:.0f} Mb/s ({source}), {got / claimed:.0%} of the "
        return Check("net", False, "slow_net", why + f"{claimed:.0f} Mb/s offered", got, claimed)
    return Check("net", True, None, f"downloads at {got:.0f} Mb/s ({source})", got, claimed)


def probe_net_mbps(doc: Any) -> float | None:
    """The preflight's own download measurement, Mb/s, if it made one."""
    sec = _section(doc, "net")
    return _num(sec.get("mbps")) if sec is not None else None


def xid_check(doc: Any) -> Check:
    """XID and ECC events an NVML event set caught, and a GPU NVML calls lost: the sampler's or
    the preflight's `xid` section (`events`: [{"xid": 79, ...}], `gpu_lost`, `supported`)."""
    sec = doc.get("xid") if isinstance(doc, Mapping) else None
    if not isinstance(sec, Mapping):
        return _unknown("xid", "no XID section")
    if sec.get("gpu_lost") is True:
        return Check("xid", False, "xid", "the GPU has fallen off the bus (NVML: GPU is lost)", 79)
    raw = sec.get("events")
    events: Sequence[Any] = raw if isinstance(raw, list) else []
    fatal: list[int] = []
    for ev in events[:100]:
        if not isinstance(ev, Mapping):
            continue
        xid = ev.get("xid")
        if isinstance(xid, int) and not isinstance(xid, bool) and xid in FATAL_XIDS:
            fatal.append(xid)
        elif ev.get("type") == "double_bit_ecc":
            fatal.append(48)
    if fatal:
        listed = ", ".join(str(x) for x in sorted(set(fatal)))
        return Check("xid", False, "xid", f"fatal XID {listed} under load", float(fatal[0]))
    if sec.get("supported") is False:
        return _unknown("xid", "NVML event sets not supported on this host")
    return Check("xid", True, None, f"no fatal XID ({len(events)} events)")


def deep_checks(
    doc: Any, offer: Mapping[str, Any], wanted_disk_gb: float | None, policy: CheckPolicy
) -> list[Check]:
    """Every enabled check on one preflight document, against the offer as listed."""
    gpu = str(offer.get("gpu_name") or "")
    out = []
    if policy.pcie:
        out.append(pcie_check(doc, gpu, policy))
    if policy.vram:
        out.append(vram_check(doc, offer.get("gpu_ram"), policy))
    if policy.disk:
        out.append(disk_check(doc, wanted_disk_gb, offer.get("disk_bw"), policy))
    if policy.net:
        out.append(net_check(probe_net_mbps(doc), offer.get("inet_down"), policy))
    if policy.xid:
        out.append(xid_check(doc))
    return out


def first_failure(checks: Iterable[Check]) -> Check | None:
    """The check that fails the host, if any (unknowns never do)."""
    return next((c for c in checks if c.ok is False), None)
