"""AMD Instinct GPUs from sysfs: the DRM card's PCI device joined with the KFD topology.

For each PCI function of vendor ``0x1002`` bound to ``amdgpu`` the PCI directory gives the
product name, VRAM size, partition modes, DRM card and render node and RAS counters; the KFD
topology (``sys/class/kfd/kfd/topology/nodes``) gives one node per compute partition, joined to
its GPU by ``domain`` + ``location_id`` (bus and device; the kernel ORs the partition into the
function bits) and to its render node by ``drm_render_minor``. No amd-smi is needed
(sources: ``docs/references.md``, "Devices").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from drakit.sysfs import PciFunction, read_pci_functions

__all__ = ["AMD_VENDOR", "AmdGpu", "KfdNode", "family_of", "read_amd_gpus"]

AMD_VENDOR = 0x1002
_GPU_BASE_CLASSES = (0x03, 0x12)
_FAMILIES = {90400: ("gfx940", "CDNA3"), 90401: ("gfx941", "CDNA3"), 90402: ("gfx942", "CDNA3")}
_FAMILIES[90500] = ("gfx950", "CDNA4")


def family_of(gfx_target_version: int) -> tuple[str, str] | None:
    """``(gfx target, family)`` for a KFD ``gfx_target_version`` (90402 -> gfx942, CDNA3)."""
    return _FAMILIES.get(gfx_target_version)


@dataclass(frozen=True)
class KfdNode:
    """One KFD compute node (a whole GPU in SPX, one partition otherwise)."""

    node: int
    render_minor: int
    compute_units: int
    xcc: int
    gfx_target_version: int
    memory_bytes: int | None


@dataclass(frozen=True)
class AmdGpu:
    """One AMD GPU and its partitions as sysfs shows them."""

    fn: PciFunction
    product_name: str | None
    vram_bytes: int | None
    compute_partition: str | None
    memory_partition: str | None
    card: int | None
    render_minor: int | None
    driver_version: str | None
    nodes: tuple[KfdNode, ...]
    ras_uncorrectable: dict[str, int]
    ras_unreadable: tuple[str, ...] = ()
    """RAS blocks whose ``<block>_err_count`` shows no ``ue`` count: amdgpu answers
    ``Query currently inaccessible`` while it recovers the GPU, and ``EINVAL`` when the query
    fails (amdgpu_ras.c, amdgpu_ras_sysfs_read)."""
    kfd_refused: int = 0
    """KFD topology nodes of the machine whose ``properties`` the kernel refused (``EPERM``):
    they cannot be joined to their GPUs (see :func:`_kfd_nodes`)."""

    @property
    def partitioned(self) -> bool:
        """Whether KFD shows more than one compute partition for this GPU."""
        return len(self.nodes) > 1

    def card_of(self, root: Path, render_minor: int) -> int | None:
        """The card number beside a render node (XCP partitions have their own cards)."""
        link = root / "sys/class/drm" / f"renderD{render_minor}"
        drm = Path(os.path.realpath(link)).parent
        for entry in sorted(drm.iterdir()) if drm.is_dir() else []:
            m = re.fullmatch(r"card(\d+)", entry.name)
            if m:
                return int(m.group(1))
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _properties(path: Path) -> dict[str, int] | None:
    """``key value`` lines as ints; ``None`` when the kernel refuses the read (EPERM)."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except PermissionError:
        return None
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        v = _int(value.strip())
        if v is not None:
            out[key] = v
    return out


def _kfd_nodes(root: Path) -> tuple[dict[str, list[KfdNode]], int]:
    """BDF (function 0) -> its KFD GPU nodes, by render minor; and how many nodes refused.

    amdkfd answers a GPU node's ``properties`` with ``EPERM`` to a process whose device cgroup
    does not let it open the GPU's render node (``kfd_topology.c``, ``node_show``); such a node
    cannot be joined to its GPU, so it is counted instead.
    """
    nodes_dir = root / "sys/class/kfd/kfd/topology/nodes"
    out: dict[str, list[KfdNode]] = {}
    refused = 0
    if not nodes_dir.is_dir():
        return out, refused
    for entry in sorted(nodes_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        props = _properties(entry / "properties")
        if props is None:
            refused += 1
            continue
        if props.get("cpu_cores_count", 0) or not props.get("simd_count"):
            continue
        loc, domain = props.get("location_id", 0), props.get("domain", 0)
        bdf = f"{domain:04x}:{(loc >> 8) & 0xFF:02x}:{(loc >> 3) & 0x1F:02x}.0"
        bank = _properties(entry / "mem_banks/0/properties") or {}
        per_cu = props.get("simd_per_cu") or 4
        out.setdefault(bdf, []).append(
            KfdNode(
                node=int(entry.name),
                render_minor=props.get("drm_render_minor", 0),
                compute_units=props["simd_count"] // per_cu,
                xcc=props.get("num_xcc", 1),
                gfx_target_version=props.get("gfx_target_version", 0),
                memory_bytes=bank.get("size_in_bytes"),
            )
        )
    for nodes in out.values():
        nodes.sort(key=lambda n: n.render_minor)
    return out, refused


def _drm(pci: Path, prefix: str) -> int | None:
    d = pci / "drm"
    if not d.is_dir():
        return None
    for entry in sorted(d.iterdir()):
        m = re.fullmatch(prefix + r"(\d+)", entry.name)
        if m:
            return int(m.group(1))
    return None


def _ras(pci: Path) -> tuple[dict[str, int], tuple[str, ...]]:
    """Uncorrectable error counts above 0 by RAS block, and the blocks that show no count."""
    out = {}
    unreadable = []
    ras = pci / "ras"
    for f in sorted(ras.glob("*_err_count")) if ras.is_dir() else []:
        block = f.name.removesuffix("_err_count")
        count = None
        for line in (_read(f) or "").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "ue":
                count = _int(value.strip())
        if count is None:
            unreadable.append(block)
        elif count:
            out[block] = count
    return out, tuple(unreadable)


def _mode(text: str | None) -> str | None:
    """A partition mode file's value (``CPX``), ``None`` when unreadable or ``UNKNOWN``.

    amdgpu refuses both mode files while it resets the GPU (``-EPERM``) and may answer
    ``UNKNOWN`` (amdgpu_gfx.c, amdgpu_gfx_get_current_compute_partition).
    """
    mode = (text or "").upper()
    return mode if mode and mode != "UNKNOWN" else None


_MODES_BY_COUNT = {1: "SPX", 2: "DPX", 3: "TPX", 4: "QPX"}


def _mode_of(nodes: tuple[KfdNode, ...]) -> str | None:
    """The compute partition mode KFD's nodes of one GPU show (what the mode file would say).

    One node per partition: one is SPX, two DPX, three TPX, four QPX, more with one XCC each
    CPX. Partition devices are named after the mode, so a mode file amdgpu refuses for a while
    does not rename them.
    """
    mode = _MODES_BY_COUNT.get(len(nodes))
    if mode is None and nodes and all(n.xcc == 1 for n in nodes):
        mode = "CPX"
    return mode


def read_amd_gpus(root: Path) -> list[AmdGpu]:
    """Every AMD GPU bound to amdgpu under ``root``, in PCI order."""
    kfd, refused = _kfd_nodes(root)
    version = _read(root / "sys/module/amdgpu/version") or None
    out = []
    for fn in read_pci_functions(root, vendor=AMD_VENDOR):
        if fn.driver != "amdgpu" or fn.class_code >> 16 not in _GPU_BASE_CLASSES:
            continue
        pci = Path(os.path.realpath(root / "sys/bus/pci/devices" / fn.bdf))
        nodes = tuple(kfd.get(fn.bdf, ()))
        compute = _mode(_read(pci / "current_compute_partition")) or _mode_of(nodes)
        memory = _mode(_read(pci / "current_memory_partition"))
        ras, ras_unreadable = _ras(pci)
        out.append(
            AmdGpu(
                fn=fn,
                product_name=_read(pci / "product_name") or None,
                vram_bytes=_int(_read(pci / "mem_info_vram_total")),
                compute_partition=compute,
                memory_partition=memory,
                card=_drm(pci, "card"),
                render_minor=_drm(pci, "renderD"),
                driver_version=version,
                nodes=nodes,
                ras_uncorrectable=ras,
                ras_unreadable=ras_unreadable,
                kfd_refused=refused,
            )
        )
    return out
