"""Optimal pairing, checked against exhaustive search on random PCI trees and every profile."""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Sequence

import pytest

from drakit.sim import list_profiles
from drakit.sysfs import PciFunction, pci_distance, read_pci_functions
from drakit.testing import open_host
from drakit.testing.plugin import SimNodeFactory
from drakit_composite.pairing import (
    COUPLINGS,
    TIER,
    Coupling,
    Member,
    coupling_of,
    pair_members,
)
from drakit_composite.plugin import CompositePlugin

Score = tuple[int, int]
"""(pairs, -total distance): larger is better."""


def fn(bdf: str, chain: Sequence[str], numa: int | None) -> PciFunction:
    return PciFunction(
        bdf=bdf, vendor=0x10DE, device=1, class_code=0x030200, numa_node=numa, chain=tuple(chain)
    )


def cost(a: PciFunction, b: PciFunction) -> int:
    return COUPLINGS.index(coupling_of(a, b)) * TIER + pci_distance(a, b)


def allowed(a: PciFunction, b: PciFunction, max_distance: int | None, max_coupling: str) -> bool:
    return COUPLINGS.index(coupling_of(a, b)) <= COUPLINGS.index(max_coupling) and (  # type: ignore[arg-type]
        max_distance is None or pci_distance(a, b) <= max_distance
    )


def brute_force(
    gpus: Sequence[Member], nics: Sequence[Member], max_distance: int | None, max_coupling: str
) -> Score:
    """Every partial matching, enumerated: the best (pairs, -distance)."""
    best: Score = (0, 0)
    for k in range(1, min(len(gpus), len(nics)) + 1):
        for gs in itertools.combinations(gpus, k):
            for ns in itertools.permutations(nics, k):
                if all(
                    allowed(g.pci, n.pci, max_distance, max_coupling)
                    for g, n in zip(gs, ns, strict=True)
                ):
                    best = max(
                        best, (k, -sum(cost(g.pci, n.pci) for g, n in zip(gs, ns, strict=True)))
                    )
    return best


def exhaustive_dp(gpus: Sequence[Member], nics: Sequence[Member]) -> Score:
    """The same optimum by dynamic programming over used-NIC masks (for 8x8 profiles)."""

    @functools.cache
    def best(i: int, used: int) -> Score:
        if i == len(gpus):
            return (0, 0)
        out = best(i + 1, used)
        for j, n in enumerate(nics):
            if not used >> j & 1:
                c, d = best(i + 1, used | 1 << j)
                out = max(out, (c + 1, d - cost(gpus[i].pci, n.pci)))
        return out

    return best(0, 0)


def score(pairs: Sequence[object]) -> Score:
    return (len(pairs), -sum(p.distance for p in pairs))  # type: ignore[attr-defined]


def random_tree(rng: random.Random) -> tuple[list[Member], list[Member]]:
    """1-3 root complexes on 1-2 NUMA nodes; root ports with devices directly or behind
    one or two levels of switches; GPUs and NICs scattered over the leaves."""
    leaves: list[tuple[tuple[str, ...], int | None]] = []
    bus = 0
    numa_nodes = rng.choice([1, 2])
    for r in range(rng.randint(1, 3)):
        root = f"pci0000:{r * 0x40:02x}"
        numa = rng.choice([None, *range(numa_nodes)]) if rng.random() < 0.1 else r % numa_nodes
        for _ in range(rng.randint(1, 2)):
            bus += 1
            port = (root, f"0000:{r * 0x40:02x}:{bus:02x}.0")
            depth = rng.choice([0, 1, 1, 2])
            for s in range(rng.randint(1, 3)):
                chain = port
                for level in range(depth):
                    bus += 1
                    chain = (*chain, f"0000:{bus:02x}:{s:02x}.{level}")
                leaves.append((chain, numa))
    gpus: list[Member] = []
    nics: list[Member] = []
    for kind, out in (("gpu", gpus), ("nic", nics)):
        for i in range(rng.randint(1, 4)):
            chain, numa = rng.choice(leaves)
            bus += 1
            bdf = f"0000:{bus:02x}:00.0"
            out.append(Member(name=f"{kind}-{i}", pci=fn(bdf, (*chain, bdf), numa)))
    return gpus, nics


@pytest.mark.parametrize("seed", range(1200))
def test_random_tree_pairing_is_optimal(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible trees, not secrets
    gpus, nics = random_tree(rng)
    max_distance = rng.choice([None, None, 4, 6, 8])
    max_coupling = rng.choice(["system", "system", "numa", "root", "switch"])
    pairs = pair_members(gpus, nics, max_distance=max_distance, max_coupling=max_coupling)  # type: ignore[arg-type]
    assert score(pairs) == brute_force(gpus, nics, max_distance, max_coupling)
    # a valid matching that respects the limits
    assert len({p.gpu.name for p in pairs}) == len({p.nic.name for p in pairs}) == len(pairs)
    for p in pairs:
        assert allowed(p.gpu.pci, p.nic.pci, max_distance, max_coupling)
        assert p.coupling == coupling_of(p.gpu.pci, p.nic.pci)


def test_pairing_is_deterministic_whatever_the_input_order() -> None:
    rng = random.Random(7)  # noqa: S311
    for _ in range(50):
        gpus, nics = random_tree(rng)
        first = pair_members(gpus, nics)
        for _ in range(3):
            g, n = gpus[:], nics[:]
            rng.shuffle(g)
            rng.shuffle(n)
            assert pair_members(g, n) == first


def test_greedy_counterexample_loses_a_pair() -> None:
    """The cheapest combination first (gpu-0 with nic-0) would leave gpu-1 alone: nic-0 is the
    only NIC gpu-1 may reach within 5 hops."""
    sw = ("pci0000:00", "0000:00:01.0", "0000:01:00.0")
    g0 = Member("gpu-0", fn("0000:02:00.0", (*sw, "0000:02:00.0"), 0))
    n0 = Member("nic-0", fn("0000:03:00.0", (*sw, "0000:03:00.0"), 0))
    g1 = Member("gpu-1", fn("0000:06:00.0", (*sw, "0000:04:00.0", "0000:06:00.0"), 0))
    n1 = Member("nic-1", fn("0000:05:00.0", ("pci0000:00", "0000:00:02.0", "0000:05:00.0"), 0))
    pairs = pair_members([g0, g1], [n0, n1], max_distance=5)
    assert len(pairs) == 2
    assert {(p.gpu.name, p.nic.name) for p in pairs} == {("gpu-0", "nic-1"), ("gpu-1", "nic-0")}


SWITCH = ("pci0000:00", "0000:00:01.0", "0000:01:00.0")


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (
            ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "x"),
            ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "y"),
            "switch",
        ),
        (("pci0000:00", "0000:00:01.0", "x"), ("pci0000:00", "0000:00:02.0", "y"), "root"),
        (("pci0000:00", "x"), ("pci0000:40", "y"), "numa"),
    ],
)
def test_couplings(a: tuple[str, ...], b: tuple[str, ...], expected: Coupling) -> None:
    assert coupling_of(fn("0000:00:00.0", a, 0), fn("0000:00:00.1", b, 0)) == expected
    assert coupling_of(fn("0000:00:00.0", a, 0), fn("0000:00:00.1", b, None)) == (
        expected if expected != "numa" else "system"
    )


@pytest.mark.parametrize("profile", list_profiles())
def test_every_profile_pairs_optimally(profile: str, drakit_sim_node: SimNodeFactory) -> None:
    node = drakit_sim_node(profile, node_name=profile)
    root = node.root
    with open_host({}, node) as host:  # the default backends, as `drakit node` loads them
        found = host.discover()
        plugin = host.backends["composite"]
        assert isinstance(plugin, CompositePlugin)
        pci = {f.bdf: f for f in read_pci_functions(root)}
        members: dict[str, list[Member]] = {"gpu": [], "nic": []}
        for key, dev in found.devices.items():
            bus = dev.attributes.get("resource.kubernetes.io/pciBusID")
            kind = {plugin.settings.gpu_driver: "gpu", plugin.settings.nic_driver: "nic"}.get(
                key.driver
            )
            if kind and bus is not None and str(bus.value) in pci:
                members[kind].append(Member(key.device, pci[str(bus.value)]))
        pairs = plugin.pairs(found.devices, str(root))
    assert score(pairs) == exhaustive_dp(members["gpu"], members["nic"])
    if members["gpu"] and members["nic"]:
        assert len(pairs) == min(len(members["gpu"]), len(members["nic"]))
