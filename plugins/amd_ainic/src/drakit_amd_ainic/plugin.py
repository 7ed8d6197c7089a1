"""drakit backend for AMD AI NICs (Pensando "Pollara 400"): one device per Ethernet PF.

Discovery maps each PF to its netdev and RDMA device through sysfs (never by name), and
publishes the standard placement attributes so claims can align NICs with GPUs by
``resource.kubernetes.io/pcieRoot`` or ``numaNode``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.errors import PermanentError
from drakit.hookspecs import hookimpl
from drakit.models import (
    CdiEdits,
    ClaimInfo,
    Device,
    DeviceAttribute,
    DeviceInventory,
    NodeInfo,
    PreparedDevice,
)
from drakit.sysfs import PciFunction, read_pci_functions, standard_pci_attributes

__all__ = ["AmdAinicPlugin", "AmdAinicSettings"]

PENSANDO_VENDOR = 0x1DD8
ETH_PF = 0x1002


class AmdAinicSettings(PluginSettings):
    """``plugins.amd_ainic``."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError:
        return None


class AmdAinicPlugin:
    """Publishes each AINIC PF as a device ``ainic-<n>`` (in PCI order)."""

    settings_model: ClassVar[type[PluginSettings]] = AmdAinicSettings
    default_driver: ClassVar[str] = "ainic.amd.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self._nics: dict[str, PciFunction] = {}

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """AINIC PFs with their netdev, RDMA device, SR-IOV limits and placement."""
        root = Path(node.sysfs_root)
        pfs = [f for f in read_pci_functions(root, vendor=PENSANDO_VENDOR) if f.device == ETH_PF]
        if not pfs:
            return None
        self._nics = {f"ainic-{i}": fn for i, fn in enumerate(pfs)}
        devices = []
        for name, fn in self._nics.items():
            attrs: dict[str, int | str | bool] = {
                "type": "nic",
                "pciVendorID": f"{fn.vendor:04x}",
                "pciDeviceID": f"{fn.device:04x}",
                "rdma": bool(fn.rdma_devices),
                **standard_pci_attributes(fn),
            }
            if fn.netdevs:
                ifname = fn.netdevs[0]
                attrs["ifName"] = ifname
                speed = _read(root / "sys" / "class" / "net" / ifname / "speed")
                if speed and speed.lstrip("-").isdigit() and int(speed) > 0:
                    attrs["linkSpeedMbps"] = int(speed)
            if fn.rdma_devices:
                attrs["rdmaDevice"] = fn.rdma_devices[0]
            if fn.sriov_totalvfs is not None:
                attrs["sriovTotalVFs"] = fn.sriov_totalvfs
            devices.append(
                Device(
                    name=name,
                    attributes={k: DeviceAttribute.model_validate(v) for k, v in attrs.items()},
                )
            )
        return DeviceInventory(devices=tuple(devices))

    @hookimpl
    def drakit_prepare_devices(self, claim: ClaimInfo) -> list[PreparedDevice]:
        """Hand the RDMA char devices of each allocated NIC to the container."""
        out = []
        for dev in claim.devices:
            fn = self._nics.get(dev.device)
            if fn is None:
                raise PermanentError(
                    f"request {dev.request!r}: device {dev.device!r} is not an AINIC on this "
                    f"node (known: {', '.join(sorted(self._nics)) or 'none'})"
                )
            nodes = [{"path": "/dev/infiniband/rdma_cm"}]
            env = [f"DRAKIT_AINIC_{dev.device.upper().replace('-', '_')}={fn.bdf}"]
            if fn.netdevs:
                env.append(f"DRAKIT_AINIC_IFNAME_{fn.netdevs[0]}={fn.bdf}")
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(env=tuple(env), device_nodes=tuple(nodes)),
                )
            )
        return out

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: list[PreparedDevice]) -> bool:
        """Nothing to undo: prepare has no side effects outside the CDI spec."""
        return True
