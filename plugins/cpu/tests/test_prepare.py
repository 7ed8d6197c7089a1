"""CPU prepare through the real pipeline: DriverState + PluginHost + simulated hardware.

Claims come from an in-memory claim source, allocated by hand the way the scheduler would
(grouped devices are shared through consumedCapacity and shareID).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drakit.cpuset import parse_cpulist
from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp, open_host
from drakit.models import ClaimPrepareResult, ClaimRef
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore
from drakit_cpu.config import CPU_CONFIG_API_VERSION
from drakit_cpu.plugin import CpuPlugin
from drakit_cpu.topology import CpuTopology

DRIVER = "cpu.drakit.io"
NODE = "node-a"


@dataclass
class CpuNode:
    state: DriverState
    claims: ClaimStore
    host: PluginHost
    cdi_dir: Path

    @property
    def topology(self) -> CpuTopology:
        plugin = self.host.backends["cpu"]
        assert isinstance(plugin, CpuPlugin)
        assert plugin.topology is not None
        return plugin.topology

    def add(
        self,
        name: str,
        devices: list[tuple[str, str, int | None]],
        config: list[dict[str, Any]] | None = None,
    ) -> ClaimRef:
        """Store an allocated claim: ``devices`` are (request, device, consumed CPUs)."""
        uid = str(uuid.uuid4())
        results = []
        for request, device, cpus in devices:
            r: dict[str, Any] = {
                "request": request,
                "driver": DRIVER,
                "pool": NODE,
                "device": device,
            }
            if cpus is not None:
                r["consumedCapacity"] = {"cpu": str(cpus)}
                r["shareID"] = str(uuid.uuid4())
            results.append(r)
        self.claims.add(
            {
                "metadata": {"namespace": "ns", "name": name, "uid": uid},
                "status": {"allocation": {"devices": {"results": results, "config": config or []}}},
            }
        )
        return ClaimRef(namespace="ns", name=name, uid=uid)

    def prepare(self, *refs: ClaimRef) -> dict[str, ClaimPrepareResult]:
        return self.state.prepare(list(refs))

    def cpus(self, ref: ClaimRef) -> list[frozenset[int]]:
        """The CPUs each device of a prepared claim got, from the checkpoint."""
        rec = self.state.prepared_claims()[ref.uid]
        return [parse_cpulist(p.state["cpus"]) for p in rec.prepared["cpu"]]

    def env(self, ref: ClaimRef) -> dict[str, str]:
        """The container environment the claim's CDI spec sets."""
        spec = json.loads((self.cdi_dir / f"k8s.{DRIVER}-claim_{ref.uid}.json").read_text())
        out: dict[str, str] = {}
        for dev in spec["devices"]:
            for item in dev["containerEdits"].get("env", []):
                key, _, value = item.partition("=")
                out[key] = value
        return out

    def numa_counts(self, cpus: frozenset[int]) -> dict[int, int]:
        out: dict[int, int] = {}
        for c in cpus:
            n = self.topology.info(c).numa_node
            out[n] = out.get(n, 0) + 1
        return out


@contextmanager
def cpu_node(profile: str, **cpu: Any) -> Iterator[CpuNode]:
    with tempfile.TemporaryDirectory(prefix="drakit-cpu-prep-", dir=fast_tmp()) as tmp:
        root = Path(tmp)
        settings = DrakitSettings(
            profile=profile,
            node_name=NODE,
            state_dir=root / "state",
            cdi_dir=root / "cdi",
            plugins={"cpu": cpu},
        )
        with open_host(settings) as host:
            build_inventory(host)
            claims = ClaimStore()
            state = DriverState(
                DRIVER, host, claims, state_dir=root / "state", cdi_dir=root / "cdi", boot_id="b1"
            )
            try:
                yield CpuNode(state=state, claims=claims, host=host, cdi_dir=root / "cdi")
            finally:
                state.close()


def config(
    requests: list[str] | None = None, source: str = "FromClaim", **fields: Any
) -> dict[str, Any]:
    return {
        "source": source,
        "requests": requests or [],
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": CPU_CONFIG_API_VERSION, "kind": "CpuConfig", **fields},
        },
    }


@pytest.fixture
def genoa() -> Iterator[CpuNode]:
    with cpu_node("epyc-genoa-2s") as node:
        yield node


# -- sharing one NUMA-group device --------------------------------------------------------------


def test_two_claims_sharing_a_numa_device_get_disjoint_cpus(genoa: CpuNode) -> None:
    a = genoa.add("a", [("cpus", "cpu-numa-0", 8)])
    b = genoa.add("b", [("cpus", "cpu-numa-0", 8)])
    res = genoa.prepare(a, b)
    assert [res[a.uid].error, res[b.uid].error] == ["", ""]
    [ca], [cb] = genoa.cpus(a), genoa.cpus(b)
    assert len(ca) == len(cb) == 8
    assert not ca & cb
    assert genoa.numa_counts(ca | cb) == {0: 16}
    # each share has its own variable: a container holding both claims gets both cpusets
    env_a, env_b = genoa.env(a), genoa.env(b)
    assert len(env_a) == len(env_b) == 1
    assert not env_a.keys() & env_b.keys()
    [(name, value)] = env_a.items()
    assert name.startswith("DRAKIT_CPUSET_CPU_NUMA_0_")
    assert parse_cpulist(value) == ca


def test_one_claim_two_requests_on_one_device(genoa: CpuNode) -> None:
    ref = genoa.add("two", [("main", "cpu-numa-1", 4), ("side", "cpu-numa-1", 2)])
    assert not genoa.prepare(ref)[ref.uid].error
    main, side = genoa.cpus(ref)
    assert (len(main), len(side)) == (4, 2)
    assert not main & side
    assert len(genoa.env(ref)) == 2


def test_concurrent_prepares_never_overlap(genoa: CpuNode) -> None:
    refs = [genoa.add(f"c{i}", [("cpus", "cpu-numa-0", 12)]) for i in range(12)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda r: genoa.prepare(r)[r.uid], refs))
    assert all(not r.error for r in results), [r.error for r in results if r.error]
    sets = [genoa.cpus(r)[0] for r in refs]
    union = frozenset().union(*sets)
    assert len(union) == sum(len(s) for s in sets) == 144
    assert genoa.numa_counts(union) == {0: 144}


def test_unprepare_frees_cpus(genoa: CpuNode) -> None:
    big = genoa.add("big", [("cpus", "cpu-numa-0", 190)])
    assert not genoa.prepare(big)[big.uid].error
    late = genoa.add("late", [("cpus", "cpu-numa-0", 8)])
    err = genoa.prepare(late)[late.uid].error
    assert "not enough cpus available to satisfy request: requested=8, available=2" in err
    assert "190 of the device's 192 CPUs are held by other claims" in err
    assert not genoa.state.unprepare([big])[big.uid].error
    assert not genoa.prepare(late)[late.uid].error  # the retry gets the freed CPUs
    assert len(genoa.cpus(late)[0]) == 8


def test_prepare_is_idempotent(genoa: CpuNode) -> None:
    ref = genoa.add("again", [("cpus", "cpu-numa-1", 6)])
    first = genoa.prepare(ref)[ref.uid]
    cpus = genoa.cpus(ref)
    assert genoa.prepare(ref)[ref.uid] == first
    assert genoa.cpus(ref) == cpus


# -- policies -------------------------------------------------------------------------------------


def test_per_claim_distributed_policy_spreads_over_numa_nodes() -> None:
    with cpu_node("epyc-genoa-2s-nps4", group_by="socket") as node:
        dist = node.add("dist", [("cpus", "cpu-socket-0", 64)], [config(policy="distributed")])
        packed = node.add("packed", [("cpus", "cpu-socket-1", 64)])
        res = node.prepare(dist, packed)
        assert [res[dist.uid].error, res[packed.uid].error] == ["", ""]
        # 64 CPUs do not fit one 48-CPU NUMA node: distributed balances two, packed fills one
        assert sorted(node.numa_counts(node.cpus(dist)[0]).values()) == [32, 32]
        assert sorted(node.numa_counts(node.cpus(packed)[0]).values()) == [16, 48]
        rec = node.state.prepared_claims()[dist.uid]
        assert rec.prepared["cpu"][0].state["policy"] == "distributed"


def test_distributed_inside_one_numa_device_allocates_like_packed() -> None:
    with cpu_node("epyc-genoa-2s") as a, cpu_node("epyc-genoa-2s") as b:
        ra = a.add("x", [("cpus", "cpu-numa-1", 10)], [config(policy="distributed")])
        rb = b.add("x", [("cpus", "cpu-numa-1", 10)], [config(policy="packed")])
        assert not a.prepare(ra)[ra.uid].error
        assert not b.prepare(rb)[rb.uid].error
        assert a.cpus(ra) == b.cpus(rb)


def test_spread_uses_one_thread_per_core(genoa: CpuNode) -> None:
    ref = genoa.add("s", [("cpus", "cpu-numa-0", 8)], [config(policy="spread")])
    assert not genoa.prepare(ref)[ref.uid].error
    [cpus] = genoa.cpus(ref)
    assert len({genoa.topology.info(c).core_id for c in cpus}) == 8


def test_invalid_config_fails_only_its_claim(genoa: CpuNode) -> None:
    good = genoa.add("good", [("cpus", "cpu-numa-0", 4)], [config(policy="spread")])
    bad = genoa.add("bad", [("cpus", "cpu-numa-0", 4)], [config(["cpus"], policy="fast")])
    unknown = genoa.add("unknown", [("cpus", "cpu-numa-0", 4)], [config(pinning="hard")])
    res = genoa.prepare(good, bad, unknown)
    assert not res[good.uid].error
    assert res[bad.uid].error == (
        "claim ns/bad: status.allocation.devices.config[0].opaque.parameters (claim, requests "
        "['cpus']): policy: Input should be 'packed', 'distributed' or 'spread' (got 'fast')"
    )
    assert "pinning: unknown key" in res[unknown.uid].error
    assert set(genoa.state.prepared_claims()) == {good.uid}


def test_conflicting_class_and_claim_configs_fail_the_claim(genoa: CpuNode) -> None:
    ref = genoa.add(
        "mixed",
        [("cpus", "cpu-numa-0", 4)],
        [config(source="FromClass", preferUncore=True), config(policy="distributed")],
    )
    err = genoa.prepare(ref)[ref.uid].error
    assert err.startswith(
        "claim ns/mixed: request 'cpus' device 'cpu-numa-0': CpuConfig preferUncore:"
    )
    assert "only applies to policy 'packed'" in err


def test_claim_larger_than_its_group(genoa: CpuNode) -> None:
    ref = genoa.add("huge", [("cpus", "cpu-numa-0", 200)])
    assert genoa.prepare(ref)[ref.uid].error == (
        "claim ns/huge: request 'cpus' device 'cpu-numa-0': asks for 200 CPUs but the device "
        "has 192; the allocation does not match the devices this node publishes"
    )


def test_bad_consumed_capacity(genoa: CpuNode) -> None:
    ref = genoa.add("half", [("cpus", "cpu-numa-0", None)])
    genoa.claims.claims[("ns", "half")]["status"]["allocation"]["devices"]["results"][0][
        "consumedCapacity"
    ] = {"cpu": "1500m"}
    assert "must be a positive whole number of CPUs" in genoa.prepare(ref)[ref.uid].error


def test_full_pcpus_only_error_wording(genoa: CpuNode) -> None:
    ref = genoa.add("odd", [("cpus", "cpu-numa-0", 3)], [config(fullPCPUsOnly=True)])
    assert genoa.prepare(ref)[ref.uid].error == (
        "claim ns/odd: request 'cpus' device 'cpu-numa-0': packed: SMT Alignment Error: "
        "requested 3 cpus not multiple cpus per core = 2"
    )
    ok = genoa.add("even", [("cpus", "cpu-numa-0", 4)], [config(fullPCPUsOnly=True)])
    assert not genoa.prepare(ok)[ok.uid].error
    [cpus] = genoa.cpus(ok)
    assert all(genoa.topology.siblings(c) <= cpus for c in cpus)


def test_group_size_must_keep_whole_cores(genoa: CpuNode) -> None:
    ref = genoa.add(
        "g3",
        [("cpus", "cpu-numa-0", 6)],
        [config(policy="distributed", groupSize=3, fullPCPUsOnly=True)],
    )
    assert "CpuConfig groupSize: 3 is not a multiple of the 2 CPUs per core" in (
        genoa.prepare(ref)[ref.uid].error
    )


def test_node_full_pcpus_only_rejects_spread_claims() -> None:
    with cpu_node("minimal-1s", full_pcpus_only=True, reserved="0") as node:
        ref = node.add("s", [("cpus", "cpu-numa-0", 2)], [config(policy="spread")])
        assert (
            "CpuConfig policy: 'spread' cannot be used on this node"
            in node.prepare(ref)[ref.uid].error
        )
        ok = node.add("p", [("cpus", "cpu-numa-0", 6)])
        assert not node.prepare(ok)[ok.uid].error
        assert node.cpus(ok) == [frozenset({1, 2, 3, 5, 6, 7})]  # never 4, the sibling of 0


# -- individual mode ------------------------------------------------------------------------------


def test_individual_mode_prepares_the_scheduler_choice() -> None:
    with cpu_node("minimal-1s", mode="individual", reserved="0") as node:
        ref = node.add("i", [("cpus", "cpu-1", None), ("cpus", "cpu-5", None)])
        assert not node.prepare(ref)[ref.uid].error
        assert node.cpus(ref) == [frozenset({1}), frozenset({5})]
        assert node.env(ref) == {"DRAKIT_CPUSET_CPU_1": "1", "DRAKIT_CPUSET_CPU_5": "5"}
        again = node.add("j", [("cpus", "cpu-5", None)])
        err = node.prepare(again)[again.uid].error  # core or the plugin refuses, per claim
        assert "cpu-5" in err or "CPU 5" in err
        assert "still prepared for claim ns/i" in err or "held by another claim" in err
        reserved = node.add("r", [("cpus", "cpu-0", None)])
        assert "does not publish" in node.prepare(reserved)[reserved.uid].error


def test_individual_mode_rejects_a_policy() -> None:
    with cpu_node("minimal-1s", mode="individual") as node:
        ref = node.add("i", [("cpus", "cpu-2", None)], [config(policy="distributed")])
        err = node.prepare(ref)[ref.uid].error
        assert "CpuConfig policy: has no effect on individual CPU devices" in err


def test_individual_mode_full_pcpus_only_needs_whole_cores() -> None:
    with cpu_node("minimal-1s", mode="individual") as node:
        half = node.add(
            "half", [("cpus", "cpu-2", None), ("cpus", "cpu-3", None)], [config(fullPCPUsOnly=True)]
        )
        err = node.prepare(half)[half.uid].error
        assert "SMT Alignment Error: CPUs 2-3 are not whole physical cores (siblings 6-7" in err
        odd = node.add("odd", [("cpus", "cpu-1", None)], [config(fullPCPUsOnly=True)])
        assert "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2" in (
            node.prepare(odd)[odd.uid].error
        )
        whole = node.add(
            "whole",
            [("cpus", "cpu-2", None), ("cpus", "cpu-6", None)],
            [config(fullPCPUsOnly=True)],
        )
        assert not node.prepare(whole)[whole.uid].error
