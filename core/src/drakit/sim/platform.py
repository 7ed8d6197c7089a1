"""Generic platform parts for machine specs: server CPUs, PCIe root ports and switches.

What every simulated machine is built on, whatever accelerators it carries: the CPU models of
``docs/references.md`` "CPU topology" (AMD EPYC Genoa, Intel Xeon Sapphire Rapids), the root
ports of those platforms and the Broadcom PEX890xx Gen 5 switch, and
:func:`pci_tree`, which merges endpoints given by their bridge path into a bridge tree. Vendor
endpoints (GPUs, NICs) come from each backend's simulator module (``drakit_nvidia_gpu.sim``,
``drakit_amd_gpu.sim``, ``drakit_amd_ainic.sim``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from drakit.sim.spec import CacheSpec, CpuSpec, PciDeviceSpec

__all__ = [
    "CLASS_BRIDGE",
    "GIB_KIB",
    "INTEL_FLAGS",
    "PEX890XX",
    "RP_GENOA",
    "RP_SPR",
    "Bridge",
    "genoa_cpu",
    "pci_bridge",
    "pci_tree",
    "spr_cpu",
]

GIB_KIB = 1024 * 1024
"""KiB in a GiB (``memory_per_node_kib`` is in KiB)."""

CLASS_BRIDGE = 0x060400

V_AMD, V_INTEL, V_BROADCOM = 0x1022, 0x8086, 0x1000

Bridge = tuple[int, int]
"""A bridge's ``(vendor, device)``."""

RP_GENOA: Bridge = (V_AMD, 0x14AB)
"""Genoa/Bergamo GPP bridge (root port)."""
RP_SPR: Bridge = (V_INTEL, 0x352A)
"""Sapphire Rapids PCIe root port."""
PEX890XX: Bridge = (V_BROADCOM, 0xC030)
"""Broadcom/LSI PEX890xx Gen 5 switch (upstream and downstream ports)."""


class _Caches(TypedDict):
    """A CPU model's cache levels, as :class:`CpuSpec` takes them."""

    l1d: CacheSpec
    l1i: CacheSpec
    l2: CacheSpec
    l3: CacheSpec


_GENOA_CACHES = _Caches(
    l1d=CacheSpec(size_kib=32, ways=8),
    l1i=CacheSpec(size_kib=32, ways=8),
    l2=CacheSpec(size_kib=1024, ways=8),
    l3=CacheSpec(size_kib=32768, ways=16),  # 32 MB per CCD
)
_SPR_CACHES = _Caches(
    l1d=CacheSpec(size_kib=48, ways=12),
    l1i=CacheSpec(size_kib=32, ways=8),
    l2=CacheSpec(size_kib=2048, ways=16),
    l3=CacheSpec(size_kib=107520, ways=15),  # 105 MB per socket
)
_AMD_FLAGS = ("fpu", "sse2", "ht", "avx2", "avx512f", "avx512_bf16", "constant_tsc")
INTEL_FLAGS = ("fpu", "sse2", "ht", "avx2", "avx512f", "amx_tile", "amx_bf16", "constant_tsc")
"""The ``flags`` subset written for Intel Xeon parts."""


def genoa_cpu(
    model_name: str, cores: int, cores_per_ccd: int, *, nps: int, mem_node_gib: int, mhz: float
) -> CpuSpec:
    """Two AMD EPYC Genoa sockets of ``cores`` cores (SMT2), L3 per CCD, NPS ``nps``."""
    return CpuSpec(
        model_name=model_name,
        vendor_id="AuthenticAMD",
        cpu_family=25,
        model=17,
        stepping=1,
        mhz=mhz,
        sockets=2,
        cores_per_socket=cores,
        threads_per_core=2,
        numa_nodes_per_socket=nps,
        cores_per_l3=cores_per_ccd,
        # Zen 4 numbers core_id by CCD slot (8 per CCD), so parts with fewer active cores per
        # CCD have gaps in core_id.
        core_id_slots_per_l3=8,
        numa_distance_same_socket=12,
        numa_distance_remote=32,
        memory_per_node_kib=mem_node_gib * GIB_KIB,
        flags=_AMD_FLAGS,
        **_GENOA_CACHES,
    )


def spr_cpu(model_name: str, snc: int, mem_node_gib: int) -> CpuSpec:
    """Two Intel Xeon Sapphire Rapids sockets of 56 cores (SMT2), socket-wide L3, SNC ``snc``."""
    return CpuSpec(
        model_name=model_name,
        vendor_id="GenuineIntel",
        cpu_family=6,
        model=143,
        stepping=8,
        mhz=2000.0,
        sockets=2,
        cores_per_socket=56,
        threads_per_core=2,
        numa_nodes_per_socket=snc,
        cores_per_l3=56,  # the L3 is socket-wide even with SNC (cpu.md 4.2)
        numa_distance_same_socket=12,
        numa_distance_remote=21,
        memory_per_node_kib=mem_node_gib * GIB_KIB,
        flags=INTEL_FLAGS,
        **_SPR_CACHES,
    )


def pci_bridge(
    domain: int, short: str, ident: Bridge, children: tuple[PciDeviceSpec, ...]
) -> PciDeviceSpec:
    """A bridge function ``<domain>:<short>`` bound to ``pcieport`` carrying ``children``."""
    return PciDeviceSpec(
        address=f"{domain:04x}:{short}",
        vendor=ident[0],
        device=ident[1],
        class_code=CLASS_BRIDGE,
        revision=0xB0 if ident == PEX890XX else 0x00,
        driver="pcieport",
        children=children,
    )


def pci_tree(
    domain: int,
    leaves: Sequence[tuple[Sequence[str], PciDeviceSpec]],
    bridges: Sequence[Bridge],
    depth: int = 0,
) -> tuple[PciDeviceSpec, ...]:
    """Merge endpoint paths (``["00:01.1", "01:00.0", ...]`` of bridges) into a bridge tree.

    ``bridges[k]`` is the identity of a bridge at depth ``k`` (0 = root port, 1 = switch
    upstream port, 2 = switch downstream port, ...). Order of first appearance is kept.
    """
    order: list[str | PciDeviceSpec] = []
    groups: dict[str, list[tuple[Sequence[str], PciDeviceSpec]]] = {}
    for path, leaf in leaves:
        if not path:
            order.append(leaf)
            continue
        if path[0] not in groups:
            groups[path[0]] = []
            order.append(path[0])
        groups[path[0]].append((path[1:], leaf))
    return tuple(
        item
        if isinstance(item, PciDeviceSpec)
        else pci_bridge(
            domain, item, bridges[depth], pci_tree(domain, groups[item], bridges, depth + 1)
        )
        for item in order
    )
