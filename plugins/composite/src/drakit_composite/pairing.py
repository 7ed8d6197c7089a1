"""Optimal GPU-NIC pairing: the most pairs, then the least total PCIe distance.

Each GPU/NIC combination gets a *coupling* (how close they sit) and a *distance*:

==========  =====================================================  ==========================
coupling    meaning                                                distance
==========  =====================================================  ==========================
``switch``  a common PCI bridge below the root port (same switch)  hops
``root``    the same root complex, no common bridge below it        ``1 * TIER`` + hops
``numa``    different root complexes on the same NUMA node          ``2 * TIER`` + hops
``system``  different NUMA nodes (or NUMA unknown)                  ``3 * TIER`` + hops
==========  =====================================================  ==========================

``TIER`` exceeds any hop count, so a closer coupling always beats a shorter path of a looser
one. The assignment is a minimum-cost bipartite matching computed with the Hungarian algorithm
of the ``munkres`` library (pure Python: a node driver does not carry SciPy's ~70 MiB of
NumPy and SciPy for an at most 16 x 16 matrix): combinations that the settings forbid
(``max_distance`` hops, ``max_coupling``) cost more than all allowed combinations together,
so the solver first maximises the number of allowed pairs and then minimises their total
distance. Inputs are sorted by bus ID first, so the same hardware always gives the same pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from munkres import Munkres

from drakit.sysfs import PciFunction, pci_distance

__all__ = [
    "COUPLINGS",
    "TIER",
    "Coupling",
    "Member",
    "Pair",
    "coupling_of",
    "numa_sockets",
    "pair_members",
]

Coupling = Literal["switch", "root", "numa", "system"]
COUPLINGS: tuple[Coupling, ...] = ("switch", "root", "numa", "system")
"""Closest first."""

TIER = 1000
"""Distance added per coupling step; larger than any PCI hop count."""


@dataclass(frozen=True)
class Member:
    """A GPU or NIC to pair: its device name and PCI function."""

    name: str
    pci: PciFunction


@dataclass(frozen=True)
class Pair:
    """One chosen GPU-NIC pair."""

    gpu: Member
    nic: Member
    coupling: Coupling
    hops: int
    distance: int


def coupling_of(a: PciFunction, b: PciFunction) -> Coupling:
    """How closely two functions are coupled (see the module docstring)."""
    common = 0
    for x, y in zip(a.chain, b.chain, strict=False):
        if x != y:
            break
        common += 1
    # chain = (root complex, root port, [switch ports...], function): sharing more than the
    # root complex and the root port means a common bridge below the root port, i.e. a switch
    if common >= 2 and common < min(len(a.chain), len(b.chain)):  # noqa: PLR2004
        return "switch"
    if common >= 1:
        return "root"
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return "numa"
    return "system"


def _distance(coupling: Coupling, hops: int) -> int:
    return COUPLINGS.index(coupling) * TIER + hops


def pair_members(
    gpus: Sequence[Member],
    nics: Sequence[Member],
    *,
    max_distance: int | None = None,
    max_coupling: Coupling = "system",
) -> list[Pair]:
    """The optimal pairing of ``gpus`` and ``nics``, sorted by GPU bus ID.

    Args:
        gpus: the GPUs (any order).
        nics: the NICs (any order).
        max_distance: never pair two functions more than this many PCI hops apart.
        max_coupling: never pair two functions coupled more loosely than this.
    """
    g = sorted(gpus, key=lambda m: (m.pci.bdf, m.name))
    n = sorted(nics, key=lambda m: (m.pci.bdf, m.name))
    if not g or not n:
        return []
    limit = COUPLINGS.index(max_coupling)
    info: dict[tuple[int, int], tuple[Coupling, int]] = {}
    allowed: set[tuple[int, int]] = set()
    for i, gm in enumerate(g):
        for j, nm in enumerate(n):
            c, hops = coupling_of(gm.pci, nm.pci), pci_distance(gm.pci, nm.pci)
            info[i, j] = (c, hops)
            if COUPLINGS.index(c) <= limit and (max_distance is None or hops <= max_distance):
                allowed.add((i, j))
    # a forbidden combination costs more than every allowed one together: fewer forbidden
    # combinations in the assignment always win, then the lower total distance
    forbidden = sum(_distance(*info[ij]) for ij in allowed) + 1
    cost = [
        [_distance(*info[i, j]) if (i, j) in allowed else forbidden for j in range(len(n))]
        for i in range(len(g))
    ]
    out = []
    for i, j in Munkres().compute(cost):  # a rectangular matrix is padded with zeros
        if (i, j) not in allowed:
            continue
        c, hops = info[i, j]
        out.append(Pair(gpu=g[i], nic=n[j], coupling=c, hops=hops, distance=_distance(c, hops)))
    return sorted(out, key=lambda p: (p.gpu.pci.bdf, p.nic.pci.bdf))


def numa_sockets(sysfs_root: str | Path) -> dict[int, int]:
    """NUMA node -> CPU socket (``physical_package_id`` of the node's first CPU), from sysfs.

    Nodes without CPUs, or whose files are unreadable, are left out.
    """
    nodes = Path(sysfs_root) / "sys" / "devices" / "system" / "node"
    cpus = Path(sysfs_root) / "sys" / "devices" / "system" / "cpu"
    out: dict[int, int] = {}
    if not nodes.is_dir():
        return out
    for entry in nodes.iterdir():
        if not entry.name.startswith("node") or not entry.name[4:].isdigit():
            continue
        try:
            first = (entry / "cpulist").read_text(encoding="ascii").strip().split(",")[0]
            cpu = int(first.split("-")[0])
            package = (cpus / f"cpu{cpu}" / "topology" / "physical_package_id").read_text(
                encoding="ascii"
            )
            out[int(entry.name[4:])] = int(package.strip())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
    return out
