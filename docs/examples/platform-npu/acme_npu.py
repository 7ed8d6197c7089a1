"""A worked example: simulated hardware that is not a PCI function (an SoC NPU on the platform bus).

Many accelerators are not PCI functions: an NPU in an Arm SoC is a *platform device*, described
by the device tree, with no vendor/device/class files and no ``/sys/bus/pci`` entry. This file
is a whole backend for one, and the simulated machine its tests run on. As sysfs shows it::

    /sys/devices/platform/soc/acme-npu.<n>/          the device (what the kernel registered)
        uevent          DRIVER=acme_npu, OF_COMPATIBLE_0=acme,npu-v2, OF_FULLNAME=/soc/npu@<addr>
        numa_node       -1 on most SoCs (no NUMA)
        driver -> ../../../../bus/platform/drivers/acme_npu
        tops, mem_mib, serial, firmware_version     the driver's own attributes
    /sys/bus/platform/devices/acme-npu.<n> -> ../../../devices/platform/soc/acme-npu.<n>
    /dev/acme-npu<n>    the character device a container opens

Three pieces, each at its seam:

* :class:`NpuPart` is a :class:`drakit.sim.SimPart`: the simulator calls its ``write`` after the
  generic tree (CPUs, memory) is built, and it writes the files above under the simulated root,
  with :func:`drakit.sim.make_device_node` for the device nodes;
* :func:`machine` is the :class:`drakit.sim.MachineSpec`: a small CPU-only profile plus the part;
* :class:`AcmeNpuPlugin` is the backend: it reads ``<sysfs_root>/sys/bus/platform/devices`` with
  :func:`drakit.sysfs.read_attribute` (the same code on a node and on the simulated root), and
  hands a claim the device node. Packaged, it is the ``acme_npu`` entry point of the
  ``drakit.plugins`` group; ``tests/unit/test_example_platform_npu.py`` installs it so and runs
  it through the test kit. ``docs/simulated-hardware.md`` walks through it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.errors import PermanentError
from drakit.hookspecs import hookimpl
from drakit.models import (
    CdiDeviceNode,
    CdiEdits,
    ClaimInfo,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceInventory,
    NodeInfo,
    PreparedDevice,
)
from drakit.sim import MachineSpec, get_profile, make_device_node
from drakit.sysfs import read_attribute

DRIVER = "npu.acme.example.com"
COMPATIBLE = "acme,npu-v2"
PLATFORM_DEVICES = Path("sys/bus/platform/devices")

# -- the simulated hardware (a SimPart) ------------------------------------------------------


@dataclass(frozen=True)
class NpuPart:
    """``count`` NPUs on the simulated SoC's platform bus (a :class:`drakit.sim.SimPart`)."""

    count: int = 4
    tops: int = 40
    mem_mib: int = 8192
    firmware: str = "2.3.1"

    def write(self, spec: MachineSpec, root: Path) -> None:
        """Write the NPUs' sysfs files and device nodes under the simulated ``root``."""
        del spec  # the NPUs do not depend on the rest of the machine
        drivers = root / "sys" / "bus" / "platform" / "drivers" / "acme_npu"
        drivers.mkdir(parents=True, exist_ok=True)
        (root / PLATFORM_DEVICES).mkdir(parents=True, exist_ok=True)
        for n in range(self.count):
            name = f"acme-npu.{n}"
            dev = root / "sys" / "devices" / "platform" / "soc" / name
            dev.mkdir(parents=True)
            address = 0x1F000000 + n * 0x100000
            files = {
                "uevent": f"DRIVER=acme_npu\nOF_NAME=npu\nOF_FULLNAME=/soc/npu@{address:x}\n"
                f"OF_COMPATIBLE_0={COMPATIBLE}\nOF_COMPATIBLE_N=1\n",
                "numa_node": "-1",
                "tops": str(self.tops),
                "mem_mib": str(self.mem_mib),
                "serial": f"ACME{n:04d}",
                "firmware_version": self.firmware,
            }
            for file, text in files.items():
                (dev / file).write_text(f"{text}\n" if not text.endswith("\n") else text)
            (dev / "driver").symlink_to(os.path.relpath(drivers, dev))
            (root / PLATFORM_DEVICES / name).symlink_to(
                os.path.relpath(dev, root / PLATFORM_DEVICES)
            )
            (drivers / name).symlink_to(os.path.relpath(dev, drivers))
            make_device_node(root, f"/dev/acme-npu{n}")


def machine(count: int = 4) -> MachineSpec:
    """A one-socket machine (the built-in ``minimal-1s`` CPUs) with ``count`` NPUs."""
    base = get_profile("minimal-1s")
    return dataclasses.replace(
        base,
        name="acme-soc",
        description=f"1-socket SoC with {count} Acme NPUs on the platform bus",
        parts=(*base.parts, NpuPart(count=count)),
    )


# -- discovery: the same code on a node and on the simulated root ----------------------------


@dataclass(frozen=True)
class Npu:
    """One NPU as sysfs shows it."""

    index: int
    path: Path
    tops: int
    mem_mib: int
    serial: str
    firmware: str


def read_npus(sysfs_root: str) -> list[Npu]:
    """The NPUs bound to ``acme_npu`` under ``<sysfs_root>/sys/bus/platform/devices``."""
    base = Path(sysfs_root) / PLATFORM_DEVICES
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        if not name.startswith("acme-npu."):
            continue
        dev = base / name
        uevent = read_attribute(dev / "uevent") or ""
        if f"OF_COMPATIBLE_0={COMPATIBLE}" not in uevent.split():
            continue  # another NPU generation: not ours to publish
        if os.path.basename(os.readlink(dev / "driver")) != "acme_npu":
            continue  # not bound to the driver: the device node is not there
        tops, mem = read_attribute(dev / "tops"), read_attribute(dev / "mem_mib")
        if tops is None or mem is None or not (tops.isdigit() and mem.isdigit()):
            continue
        out.append(
            Npu(
                index=int(name.rsplit(".", 1)[1]),
                path=dev,
                tops=int(tops),
                mem_mib=int(mem),
                serial=read_attribute(dev / "serial") or "",
                firmware=read_attribute(dev / "firmware_version") or "0",
            )
        )
    return out


# -- the backend ------------------------------------------------------------------------------


class AcmeNpuSettings(PluginSettings):
    """``plugins.acme_npu``: nothing beyond the common keys (``driver``, ``strategy``)."""


class AcmeNpuPlugin:
    """The ``acme_npu`` backend: a device per NPU; prepare hands out its device node."""

    settings_model: ClassVar[type[PluginSettings]] = AcmeNpuSettings
    default_driver: ClassVar[str] = DRIVER

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self._lock = threading.Lock()
        self._npus: dict[str, Npu] = {}

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """A device per NPU: its TOPS, memory, serial and firmware; no PCI attributes."""
        npus = read_npus(node.sysfs_root)
        with self._lock:
            self._npus = {f"npu-{n.index}": n for n in npus}
        devices = [
            Device(
                name=f"npu-{n.index}",
                attributes={
                    "type": "npu",
                    "tops": n.tops,
                    "serial": n.serial,
                    "firmwareVersion": DeviceAttribute(version=n.firmware),
                },
                capacity={"memory": DeviceCapacity(value=f"{n.mem_mib}Mi")},
            )
            for n in npus
        ]
        return DeviceInventory(devices=tuple(devices)) if devices else None

    @hookimpl
    def drakit_prepare_devices(self, claim: ClaimInfo) -> list[PreparedDevice]:
        """The NPU's device node, and its index in ``ACME_NPU_VISIBLE``."""
        with self._lock:
            npus = dict(self._npus)
        out = []
        for dev in claim.devices:
            npu = npus.get(dev.device)
            if npu is None:
                raise PermanentError(
                    f"claim {claim.namespace}/{claim.name} request {dev.request!r}: "
                    f"{dev.device!r} is not an Acme NPU on this node "
                    f"(known: {', '.join(sorted(npus)) or 'none'})"
                )
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(
                        env=(f"ACME_NPU_VISIBLE={npu.index}",),
                        device_nodes=(CdiDeviceNode(path=f"/dev/acme-npu{npu.index}"),),
                    ),
                )
            )
        return out

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: Sequence[PreparedDevice]) -> bool:
        """Nothing to undo: prepare changes nothing on the node."""
        del claim_uid, prepared
        return True
