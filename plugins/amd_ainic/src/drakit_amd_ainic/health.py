"""Device health from sysfs: link ``operstate``, ``carrier`` and the RDMA port ``state``.

A device is Unhealthy while its function's link is not ``up``, its carrier is lost, or its RDMA
port is not ``ACTIVE``; a VF (``vf`` mode) is also Unhealthy while its PF is. Core turns
Unhealthy into the kubelet health stream and, with ``health.taint_unhealthy``, a device taint;
both clear when the files read healthy again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from drakit.models import DeviceHealth
from drakit_amd_ainic.devices import Published
from drakit_amd_ainic.discovery import read_link

__all__ = ["device_health"]


def device_health(root: Path, pool: str, published: Mapping[str, Published]) -> list[DeviceHealth]:
    """One entry per published device."""
    sys_root = root / "sys"
    now = datetime.now(UTC)
    out = []
    for name, pub in published.items():
        fns = [pub.function]
        if pub.function is not pub.nic.pf:
            fns.append(pub.nic.pf)
        problems = []
        for fn in fns:
            problem = read_link(sys_root, fn.ifname, fn.rdma_device).problem()
            if problem:
                problems.append(f"{fn.ifname or fn.bdf}: {problem}")
        out.append(
            DeviceHealth(
                pool=pool,
                device=name,
                health="Unhealthy" if problems else "Healthy",
                message="; ".join(problems),
                last_updated=now,
            )
        )
    return out
