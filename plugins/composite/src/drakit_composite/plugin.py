"""drakit backend composing GPU-NIC pairs by PCIe distance.

It never imports the GPU or NIC backends: it sees their devices through
``drakit_compose_devices`` and places them with sysfs. Each GPU is paired with the closest free
NIC (fewest hops through the PCI tree: same switch before same root complex before anything
else), globally cheapest pairs first, ties broken by bus ID, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from pydantic import Field

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
    DeviceKey,
    NodeInfo,
    PreparedDevice,
)
from drakit.sysfs import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT, pci_distance, read_pci_functions

__all__ = ["CompositePlugin", "CompositeSettings"]


class CompositeSettings(PluginSettings):
    """``plugins.composite``."""

    gpu_driver: str = Field(default="gpu.nvidia.drakit.io", description="Driver of the GPUs")
    nic_driver: str = Field(default="ainic.amd.drakit.io", description="Driver of the NICs")
    max_distance: int | None = Field(
        default=None, ge=1, description="Do not pair devices further apart (PCI hops)"
    )


class CompositePlugin:
    """Publishes ``pair-<n>`` devices, each one GPU and its closest NIC."""

    settings_model: ClassVar[type[PluginSettings]] = CompositeSettings
    default_driver: ClassVar[str] = "pairs.composite.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.settings = context.settings_as(CompositeSettings)
        self._pairs: dict[str, tuple[str, str, str, str]] = {}

    @hookimpl
    def drakit_compose_devices(
        self, node: NodeInfo, devices: Mapping[DeviceKey, Device]
    ) -> DeviceInventory | None:
        """Pair GPUs and NICs by PCIe distance."""
        pci = {f.bdf: f for f in read_pci_functions(Path(node.sysfs_root))}

        def members(driver: str) -> list[tuple[str, str]]:
            out = []
            for key, dev in devices.items():
                bus = dev.attributes.get(PCI_BUS_ID)
                if key.driver == driver and bus is not None and str(bus.value) in pci:
                    out.append((key.device, str(bus.value)))
            return sorted(out, key=lambda m: m[1])

        gpus, nics = members(self.settings.gpu_driver), members(self.settings.nic_driver)
        if not gpus or not nics:
            return None
        candidates = sorted(
            (pci_distance(pci[gb], pci[nb]), gb, nb, g, n) for g, gb in gpus for n, nb in nics
        )
        used: set[str] = set()
        chosen = []
        for dist, gb, nb, g, n in candidates:
            if g in used or n in used:
                continue
            if self.settings.max_distance is not None and dist > self.settings.max_distance:
                continue
            used.update((g, n))
            chosen.append((gb, nb, g, n, dist))
        chosen.sort()
        pairs: dict[str, tuple[str, str, str, str]] = {}
        out = []
        for i, (gb, nb, g, n, dist) in enumerate(chosen):
            name = f"pair-{i}"
            pairs[name] = (g, gb, n, nb)
            attrs: dict[str, int | str] = {
                "type": "gpu-nic-pair",
                "gpu": g,
                "nic": n,
                "gpuBusID": gb,
                "nicBusID": nb,
                "pcieDistance": dist,
            }
            groot, nroot = pci[gb].pcie_root, pci[nb].pcie_root
            if groot and groot == nroot:
                attrs[PCIE_ROOT] = groot
            numa = pci[gb].numa_node
            if numa is not None:
                attrs[NUMA_NODE] = numa
            out.append(
                Device(
                    name=name,
                    attributes={k: DeviceAttribute.model_validate(v) for k, v in attrs.items()},
                )
            )
        self._pairs = pairs  # one swap: a prepare running meanwhile sees the old or the new map
        return DeviceInventory(devices=tuple(out))

    @hookimpl
    def drakit_prepare_devices(self, claim: ClaimInfo) -> list[PreparedDevice]:
        """Tell the container which GPU and NIC each allocated pair holds."""
        out = []
        for dev in claim.devices:
            pair = self._pairs.get(dev.device)
            if pair is None:
                raise PermanentError(
                    f"request {dev.request!r}: device {dev.device!r} is not a GPU-NIC pair on "
                    "this node"
                )
            g, gb, n, nb = pair
            tag = dev.device.upper().replace("-", "_")
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(env=(f"DRAKIT_{tag}_GPU={gb}", f"DRAKIT_{tag}_NIC={nb}")),
                    state={"gpu": g, "nic": n},
                )
            )
        return out

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: list[PreparedDevice]) -> bool:
        """Nothing to undo: prepare has no side effects outside the CDI spec."""
        return True
