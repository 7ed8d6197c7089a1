"""The simulated netlink: VF settings, MTU and channel counts recorded in a simulated tree.

Test and simulation code only: the backend never imports it. :func:`simulated_libraries` is
registered in the ``drakit.sim_libraries`` entry point group, as the NVIDIA backend's fake NVML
is: the simulated runtime calls it for a simulated root and hands the :class:`TreeNetlink` to
the backend as ``PluginContext.libraries["pyroute2"]``, which
:func:`drakit_amd_ainic.netlink.netlink_for` takes in place of pyroute2. It records what a
node's kernel would have been told as files: ``drakit-sim/netlink/<PF BDF>.json`` for VF
settings (:func:`drakit_amd_ainic.sim.vf_settings` reads them back), the VF netdev's ``mtu``
and ``queues/`` for the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from drakit.errors import RetryableError
from drakit_amd_ainic.netlink import NETLINK_LIBRARY, VfSettings

__all__ = ["NETLINK_DIR", "TreeNetlink", "simulated_libraries"]

NETLINK_DIR = Path("drakit-sim") / "netlink"
"""Relative to the root: where the backend's file-backed netlink seam records VF settings."""


class TreeNetlink:
    """Netlink into a simulated tree (see the module docstring); thread-safe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dir = str(root / NETLINK_DIR)
        self._lock = threading.Lock()
        self._dir_ready = False
        self._records: dict[str, dict[str, dict[str, Any]]] = {}

    def set_vf(self, pf_ifname: str, pf_bdf: str, vf: int, settings: VfSettings) -> None:
        """Merge ``settings`` into the PF's record for ``vf`` (atomic rewrite)."""
        d = self._dir
        with self._lock:
            if not self._dir_ready:
                os.makedirs(d, exist_ok=True)
                self._dir_ready = True
            path = f"{d}/{pf_bdf}.json"
            data = self._records.get(pf_bdf)
            if data is None:  # first write to this PF by this process: start from the file
                try:
                    data = json.loads(Path(path).read_bytes())
                except FileNotFoundError:
                    data = {}
                self._records[pf_bdf] = data
            data[str(vf)] = {**data.get(str(vf), {}), **settings.to_json()}
            tmp = f"{d}/.{pf_bdf}.json.tmp"  # one writer: this lock
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, json.dumps(data, sort_keys=True).encode())
            finally:
                os.close(fd)
            os.replace(tmp, path)

    def set_mtu(self, ifname: str, netdev_dir: Path, mtu: int) -> None:
        """Write the netdev's ``mtu`` file."""
        _write(netdev_dir / "mtu", str(mtu))

    def set_channels(self, ifname: str, netdev_dir: Path, count: int) -> None:
        """Make exactly ``count`` ``rx-N``/``tx-N`` queue directories."""
        q = f"{netdev_dir}/queues"
        try:
            have = set(os.listdir(q))
        except FileNotFoundError:
            os.mkdir(q)
            have = set()
        for entry in have:
            kind, _, n = entry.partition("-")
            if kind in ("rx", "tx") and n.isdigit() and int(n) >= count:
                try:
                    os.rmdir(f"{q}/{entry}")
                except OSError:
                    shutil.rmtree(f"{q}/{entry}")  # a queue directory with attribute files
        for name in (f"{kind}-{i}" for i in range(count) for kind in ("rx", "tx")):
            if name not in have:
                os.mkdir(f"{q}/{name}")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text + "\n")
    except OSError as e:
        raise RetryableError(f"cannot write {path}: {e.strerror}") from e


def simulated_libraries(root: Path) -> dict[str, object]:
    """The tree netlink for a simulated root with AINICs (bound to ``ionic``), else nothing.

    Registered in the ``drakit.sim_libraries`` entry point group (see the module docstring).
    """
    if (Path(root) / "sys/bus/pci/drivers/ionic").is_dir():
        return {NETLINK_LIBRARY: TreeNetlink(Path(root))}
    return {}
