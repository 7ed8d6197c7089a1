"""numa-spread with the real kube-scheduler: one claim, the widest even split each node has.

For fake nodes publishing drakit's grouped CPU slices of a 1-, 2- and 4-NUMA machine
(``minimal-1s``, ``epyc-genoa-2s``, ``spr-2s-snc2``) and an 8-NUMA one (``epyc-genoa-2s-nps4``),
the same ``numa-spread`` claim for 8 CPUs must be allocated as 1 x 8, 2 x 4, 4 x 2 and 8 x 1
CPUs, each share on a different NUMA node;
then drakit's prepare pipeline turns the scheduler's allocation into CPUs and every NUMA node
gets ``8 / k`` of them. Needs DRAPrioritizedList and DRAConsumableCapacity (on by
default in the control plane's 1.37 build).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane
from tests.e2e.nodeproc import (
    RESOURCE,
    create_claim,
    create_pod,
    device_classes,
    pipeline_for,
    wait_allocated,
)

from drakit.cpuset import parse_cpulist
from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp, open_host
from drakit.strategy_models import SimpleRequest
from drakit_cpu.plugin import CpuPlugin
from drakit_cpu.strategies import NumaSpread

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DRIVER = "cpu.drakit.io"
CPUS = 8


@pytest.fixture
def cpu_class(control_plane: ControlPlane) -> Iterator[str]:
    with device_classes(control_plane, "e2e", {"cpu": DRIVER}) as made:
        yield made["cpu"]


@pytest.mark.parametrize(
    ("profile", "numa_nodes"),
    [("minimal-1s", 1), ("epyc-genoa-2s", 2), ("spr-2s-snc2", 4), ("epyc-genoa-2s-nps4", 8)],
)
def test_numa_spread_takes_the_widest_split(
    control_plane: ControlPlane,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
    cpu_class: str,
    profile: str,
    numa_nodes: int,
) -> None:
    node = fake_node()["metadata"]["name"]
    with tempfile.TemporaryDirectory(prefix="drakit-e2e-cpu-", dir=fast_tmp()) as tmp:
        settings = DrakitSettings(
            profile=profile,
            node_name=node,
            state_dir=Path(tmp) / "state",
            cdi_dir=Path(tmp) / "cdi",
            plugins={"cpu": {}},
        )
        with open_host(settings) as host:
            for obj in build_inventory(host).slices():
                control_plane.api("POST", f"{RESOURCE}/resourceslices", obj)

            shaped = NumaSpread().shape(
                SimpleRequest(name="cpus", device_class=cpu_class, count=CPUS)
            )
            create_claim(control_plane, namespace, "spread", {"devices": shaped.to_api()})
            create_pod(
                control_plane,
                namespace,
                "p",
                node,
                claim="spread",
                ref="cpus",
                image="registry.invalid/noop",
            )
            claim = wait_allocated(
                control_plane, namespace, "spread", what=f"claim on {profile} to be allocated"
            )
            results = claim["status"]["allocation"]["devices"]["results"]
            assert {r["request"] for r in results} == {f"cpus/split-{numa_nodes}"}
            assert len(results) == numa_nodes
            assert len({r["device"] for r in results}) == numa_nodes
            assert {r["consumedCapacity"]["cpu"] for r in results} == {str(CPUS // numa_nodes)}

            # drakit prepares what the scheduler allocated: CPUS / k CPUs on each NUMA node
            with pipeline_for(host, DRIVER, claim, Path(tmp)) as (state, ref):
                assert not state.prepare([ref])[ref.uid].error
                prepared = state.prepared_claims()[ref.uid].prepared["cpu"]
            plugin = host.backends["cpu"]
            assert isinstance(plugin, CpuPlugin)
            topo = plugin.topology
            assert topo is not None
            per_numa: dict[int, int] = {}
            for p in prepared:
                for cpu in parse_cpulist(p.state["cpus"]):
                    n = topo.info(cpu).numa_node
                    per_numa[n] = per_numa.get(n, 0) + 1
            assert sorted(per_numa.values()) == [CPUS // numa_nodes] * numa_nodes


def test_full_pcpus_only_capacity_rounds_requests_to_whole_cores(
    control_plane: ControlPlane,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
    cpu_class: str,
) -> None:
    """With ``full_pcpus_only`` the capacity steps by the SMT level: 3 CPUs are rounded to 4."""
    node = fake_node()["metadata"]["name"]
    settings = DrakitSettings(
        profile="minimal-1s", node_name=node, plugins={"cpu": {"full_pcpus_only": True}}
    )
    with open_host(settings) as host:
        for obj in build_inventory(host).slices():
            control_plane.api("POST", f"{RESOURCE}/resourceslices", obj)
    exactly = {"deviceClassName": cpu_class, "capacity": {"requests": {"cpu": "3"}}}
    spec = {"devices": {"requests": [{"name": "cpus", "exactly": exactly}]}}
    create_claim(control_plane, namespace, "three", spec)
    create_pod(
        control_plane,
        namespace,
        "p",
        node,
        claim="three",
        ref="cpus",
        image="registry.invalid/noop",
    )
    claim = wait_allocated(control_plane, namespace, "three", what="claim 'three' to be allocated")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"] == {"cpu": "4"}
