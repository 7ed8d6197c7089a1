"""What amdgpu and amdkfd add to a simulated tree for AMD Instinct GPUs.

For every PCI function of vendor ``0x1002`` bound to ``amdgpu`` (a GPU, not a bridge) this
writes what the kernel shows on a real node (sources: ``docs/references.md``, "Devices"):

* in the PCI directory: ``product_name``, ``mem_info_vram_total``,
  ``available_compute_partition`` / ``available_memory_partition`` (the current modes come
  from the spec's ``extra_files``), ``ras/<block>_err_count`` (``ue: 0`` / ``ce: 0``) and
  ``drm/card<N>`` + ``drm/renderD<M>`` with ``dev`` files, linked from ``sys/class/drm``;
* the partition DRM devices ``sys/devices/platform/amdgpu_xcp_<k>/drm/{card,renderD}`` that
  the driver allocates for XCPs 1..7 of every GPU whatever the mode;
* the KFD topology ``sys/class/kfd/kfd/topology/nodes/<n>``: one CPU node per NUMA node, then
  one node per compute partition (one per GPU in SPX), with ``properties`` (``location_id``,
  ``domain``, ``drm_render_minor``, ``simd_count``, ``num_xcc``, ``gfx_target_version``...) and
  ``mem_banks/0/properties`` (``size_in_bytes``; ``local_mem_size`` is 0 as in the kernel);
* ``sys/module/amdgpu/version`` (the DKMS module's four-part version);
* the device nodes ``/dev/kfd`` and ``/dev/dri/{card,renderD}<N>`` of every DRM device above
  (stand-ins: :mod:`drakit.sim.devnodes`).

Card numbers start at 1, render minors at 128, GPUs first in PCI order, then the XCP devices
(simulation choices; the real numbering is dynamic).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from drakit.sim import MachineSpec, PciDeviceSpec, make_device_node

__all__ = ["AMD_GPU_MODELS", "AmdGpuModel", "AmdGpuSysfs", "amd_gpus", "write_amd_gpus"]

AMD_VENDOR = 0x1002
DRIVER_VERSION = "6.12.12.60400"
_MAX_XCP = 8
_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}
_RAS_BLOCKS = ("gfx", "mmhub", "sdma", "umc", "xgmi_wafl")
_DRM_MAJOR = 226
_RENDER_BASE = 128


@dataclass(frozen=True)
class AmdGpuModel:
    """What an AMD Instinct part reports.

    Attributes:
        product_name: the FRU ``product_name``.
        vram_bytes: ``mem_info_vram_total``.
        compute_units: CUs of the whole GPU.
        xcc: XCCs (compute dies).
        gfx_target_version: KFD ``gfx_target_version`` (90402 = gfx942).
        compute_modes: ``available_compute_partition``.
        memory_modes: ``available_memory_partition``.
    """

    product_name: str
    vram_bytes: int
    compute_units: int
    xcc: int
    gfx_target_version: int
    compute_modes: tuple[str, ...]
    memory_modes: tuple[str, ...]


AMD_GPU_MODELS = {
    0x74A1: AmdGpuModel(
        product_name="AMD Instinct MI300X",
        vram_bytes=192 * 2**30,
        compute_units=304,
        xcc=8,
        gfx_target_version=90402,
        compute_modes=("SPX", "DPX", "QPX", "CPX"),
        memory_modes=("NPS1", "NPS4"),
    ),
}
"""Device id -> model (MI300X: amd-gpu.md §1.1, §1.2, §3.1)."""


def _walk(devices: Sequence[PciDeviceSpec]) -> Iterator[PciDeviceSpec]:
    for dev in devices:
        yield dev
        yield from _walk(dev.children)


def amd_gpus(spec: MachineSpec) -> list[tuple[PciDeviceSpec, int]]:
    """The spec's AMD GPUs bound to amdgpu, by address, with their NUMA node."""
    out = []
    for root in spec.pci_roots:
        for dev in _walk(root.children):
            if (
                dev.vendor == AMD_VENDOR
                and dev.driver == "amdgpu"
                and not dev.is_bridge
                and dev.device in AMD_GPU_MODELS
            ):
                out.append((dev, root.numa_node))
    return sorted(out, key=lambda d: d[0].address)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="ascii")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def _drm(root: Path, parent: Path, card: int, render: int) -> None:
    for name, minor in ((f"card{card}", card), (f"renderD{render}", render)):
        d = parent / "drm" / name
        _write(d / "dev", f"{_DRM_MAJOR}:{minor}")
        _link(root / "sys/class/drm" / name, d)
        make_device_node(root, f"/dev/dri/{name}")


def _properties(values: dict[str, int]) -> str:
    return "".join(f"{k} {v}\n" for k, v in values.items())


def write_amd_gpus(spec: MachineSpec, root: Path) -> int:
    """Write the amdgpu/amdkfd files for the spec's AMD GPUs under ``root``; returns the count."""
    gpus = amd_gpus(spec)
    if not gpus:
        return 0
    sys_root = root / "sys"
    _write(sys_root / "module/amdgpu/version", DRIVER_VERSION)
    make_device_node(root, "/dev/kfd", control=True)
    topo = sys_root / "class/kfd/kfd/topology"
    _write(topo / "generation_id", "1")
    _write(topo / "system_properties", "platform_oem 0\nplatform_id 0\nplatform_rev 0\n")
    node = 0
    for _ in range(spec.cpu.numa_nodes):
        d = topo / "nodes" / str(node)
        cores = spec.cpu.total_cores // spec.cpu.numa_nodes
        _write(d / "properties", _properties({"cpu_cores_count": cores, "simd_count": 0}))
        _write(d / "gpu_id", "0")
        _write(d / "name", "")
        node += 1
    xcp_index = 0
    for i, (fn, _) in enumerate(gpus):
        model = AMD_GPU_MODELS[fn.device]
        pci = Path(os.path.realpath(sys_root / "bus/pci/devices" / fn.address))
        _write(pci / "product_name", model.product_name)
        _write(pci / "mem_info_vram_total", str(model.vram_bytes))
        _write(pci / "mem_info_vram_used", "0")
        _write(pci / "available_compute_partition", ", ".join(model.compute_modes))
        _write(pci / "available_memory_partition", ", ".join(model.memory_modes))
        for block in _RAS_BLOCKS:
            _write(pci / "ras" / f"{block}_err_count", "ue: 0\nce: 0")
        card, render = 1 + i, _RENDER_BASE + i
        _drm(root, pci, card, render)
        renders = [render]
        for _ in range(1, _MAX_XCP):
            xcp = sys_root / "devices/platform" / f"amdgpu_xcp_{xcp_index}"
            xcp_card = 1 + len(gpus) + xcp_index
            xcp_render = _RENDER_BASE + len(gpus) + xcp_index
            _drm(root, xcp, xcp_card, xcp_render)
            renders.append(xcp_render)
            xcp_index += 1
        mode = fn.extra_files.get("current_compute_partition", "SPX").strip().upper()
        parts = _PARTITIONS.get(mode, 1)
        domain, bus, devfn = fn.address.split(":")
        slot = int(devfn.split(".")[0], 16)
        location = int(bus, 16) << 8 | slot << 3
        for p in range(parts):
            d = topo / "nodes" / str(node)
            simd = model.compute_units * 4 // parts
            props = {
                "cpu_cores_count": 0,
                "simd_count": simd,
                "simd_per_cu": 4,
                "num_xcc": model.xcc // parts,
                "array_count": 4 * model.xcc // parts,
                "gfx_target_version": model.gfx_target_version,
                "vendor_id": fn.vendor,
                "device_id": fn.device,
                "location_id": location | (p if parts > 1 else 0),
                "domain": int(domain, 16),
                "drm_render_minor": renders[p],
                "hive_id": 0x1234ABCD,
                "local_mem_size": 0,
            }
            _write(d / "properties", _properties(props))
            _write(d / "gpu_id", str(0x1000 + 16 * i + p))
            _write(d / "name", "ip discovery")
            _write(
                d / "mem_banks/0/properties",
                _properties(
                    {"heap_type": 1, "size_in_bytes": model.vram_bytes // parts, "flags": 0}
                ),
            )
            node += 1
    return len(gpus)


@dataclass(frozen=True)
class AmdGpuSysfs:
    """The amdgpu/amdkfd files as a :class:`drakit.sim.SimPart`: a spec with AMD GPUs lists it.

    It writes for whatever AMD GPUs the spec holds when it is built, so a test may change a
    profile's PCI tree (``dataclasses.replace``) and keep the part.
    """

    def write(self, spec: MachineSpec, root: Path) -> None:
        """Write the files of :func:`write_amd_gpus`."""
        write_amd_gpus(spec, root)
