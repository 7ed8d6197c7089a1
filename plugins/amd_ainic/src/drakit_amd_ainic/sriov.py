"""Creating and removing VFs through ``sriov_numvfs`` (the kernel's SR-IOV ABI).

The kernel refuses to change a non-zero VF count to another non-zero one (``EBUSY``, "Disable
before enabling"), may enable fewer VFs than asked, and creates the VF functions and netdevs
asynchronously from the writer's point of view (probe, then udev; the RDMA auxiliary driver
after the netdev). So: write ``0`` first when needed, write ``N``, re-read the file, and wait
until ``virtfn<i>``, each bound VF's netdev and, on an RDMA-capable PF, its uverbs node exist.
A VF's RDMA device is its own firmware's choice (ionic_aux.c adds one only to a LIF with the
RDMA capability), so once every netdev is there the uverbs nodes get ``RDMA_GRACE`` seconds;
VFs still without one are used without RDMA.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from drakit.errors import RetryableError

__all__ = ["set_numvfs"]

log = logging.getLogger(__name__)

_POLL = 0.01
RDMA_GRACE = 2.0
"""Seconds the VFs' uverbs nodes are waited for once every VF's netdev is there."""


def _virtfns(pf_dir: Path) -> list[str]:
    return [n for n in os.listdir(pf_dir) if n.startswith("virtfn")]


_MISSING, _NETDEVS, _READY = 0, 1, 2
"""How far the VFs are: not all there (or a netdev missing), netdevs only, everything."""


def _progress(pf_dir: Path, n: int, *, rdma: bool) -> int:
    """:data:`_READY` once ``n`` VFs, their netdevs and (``rdma``) their uverbs nodes exist."""
    links = _virtfns(pf_dir)
    if len(links) != n:
        return _MISSING
    out = _READY
    for link in links:
        vf = pf_dir / link
        if not (vf / "driver").is_symlink():
            continue  # unbound: no netdev to wait for
        if not (vf / "net").is_dir():
            return _MISSING  # bound to a driver but its netdev is not there yet
        if rdma and not any((vf / "infiniband_verbs").glob("uverbs*/ibdev")):
            out = _NETDEVS  # ionic_rdma binds after ionic: its uverbs node comes last
    return out


def _write(pf_dir: Path, n: int) -> None:
    try:
        (pf_dir / "sriov_numvfs").write_text(f"{n}\n")
    except OSError as e:
        raise RetryableError(f"{pf_dir.name}: writing sriov_numvfs={n} failed: {e.strerror}") from e


def _wait(pf_dir: Path, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    rdma = (pf_dir / "infiniband").is_dir()
    netdevs_since: float | None = None  # when every VF's netdev was first seen there
    while (progress := _progress(pf_dir, n, rdma=rdma)) != _READY:
        now = time.monotonic()
        if progress == _NETDEVS:
            netdevs_since = now if netdevs_since is None else netdevs_since
            if now - netdevs_since >= RDMA_GRACE:
                log.warning(
                    "%s: VFs without an RDMA device %gs after their netdevs; using them "
                    "without RDMA (does the firmware give its VFs RDMA?)",
                    pf_dir.name,
                    RDMA_GRACE,
                )
                return
        if now > deadline:
            have = len(_virtfns(pf_dir))
            raise RetryableError(
                f"{pf_dir.name}: {have} VFs after {timeout:g}s, expected {n} (sriov_numvfs "
                f"reads {(pf_dir / 'sriov_numvfs').read_text().strip()}); check dmesg for ionic"
            )
        time.sleep(_POLL)


def set_numvfs(pf_dir: Path, n: int, *, timeout: float) -> int:
    """Make the PF have ``n`` VFs; return how many it has (the driver may grant fewer).

    Raises:
        RetryableError: the write failed or the VFs did not appear in ``timeout`` seconds.
    """
    current = len(_virtfns(pf_dir))
    if current == n:
        return n
    if current:
        _write(pf_dir, 0)
        _wait(pf_dir, 0, timeout)
    if n:
        _write(pf_dir, n)
        granted = int((pf_dir / "sriov_numvfs").read_text().strip() or "0")
        _wait(pf_dir, granted, timeout)
        return granted
    return 0
