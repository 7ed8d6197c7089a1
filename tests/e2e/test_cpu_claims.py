"""CPU backend end to end: real scheduler, real kubelet DRA manager, `drakit node` subprocess.

The node runs the CPU backend on a simulated dual-socket EPYC in NPS4 mode (4 NUMA nodes per
socket), one grouped device per socket with a consumable ``cpu`` capacity. Shown here:

* two pods' claims share one socket device through consumable capacity (the scheduler puts
  both on it) and get disjoint CPU sets at prepare;
* a per-claim ``CpuConfig`` with ``policy: distributed`` spreads the CPUs evenly over NUMA
  nodes, where the node's default ``packed`` fills one node after another;
* an invalid ``CpuConfig`` fails only its own pod's claim, naming the field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn
from tests.e2e.nodeproc import (
    DRIVERS,
    Running,
    bound_claim,
    create_claim_template,
    create_pod,
    device_classes,
    kubelet_flags,
    running_node,
)

from drakit.cpuset import parse_cpulist
from drakit.sim import materialize
from drakit_cpu.topology import CpuTopology

pytestmark = pytest.mark.e2e

CPU = DRIVERS["cpu"]
PROFILE = "epyc-genoa-2s-nps4"


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[Running]:
    plugins = {"cpu": {"group_by": "socket", "policy": "packed"}}
    with (
        materialize(PROFILE) as root,
        running_node(control_plane, "cpu", plugins, profile=PROFILE) as node,
    ):
        node.facts["topology"] = CpuTopology.from_sysfs(Path(root))
        yield node


@pytest.fixture(scope="module")
def cpu_class(control_plane: ControlPlane) -> Iterator[str]:
    with device_classes(control_plane, "cpu-e2e", {"cpu": CPU}) as made:
        yield made["cpu"]


def run_pod(
    cp: ControlPlane,
    namespace: str,
    node: Running,
    cpu_class: str,
    pod: str,
    cpus: int,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create a template + pod asking ``cpus`` CPUs of socket 0; wait until it is bound."""
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": "cpus",
                "exactly": {
                    "deviceClassName": cpu_class,
                    "selectors": [
                        {"cel": {"expression": f'device.attributes["{CPU}"].socket == 0'}}
                    ],
                    "capacity": {"requests": {"cpu": str(cpus)}},
                },
            }
        ]
    }
    if config is not None:
        devices["config"] = [
            {"requests": ["cpus"], "opaque": {"driver": CPU, "parameters": config}}
        ]
    create_claim_template(cp, namespace, pod, devices)
    create_pod(cp, namespace, pod, node.name, template=pod, ref="cpu")
    return bound_claim(cp, namespace, pod)


def prepared_cpus(node: Running, claim_uid: str) -> frozenset[int]:
    """The cpuset drakit put into the claim's CDI spec."""
    spec = node.dirs.cdi_specs()[f"k8s.{CPU}-claim_{claim_uid}.json"]
    env = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
    sets = [e.split("=", 1)[1] for e in env if e.startswith("DRAKIT_CPUSET_")]
    assert len(sets) == 1, env
    return parse_cpulist(sets[0])


def prepare(standin: KubeletStandIn, node: Running, namespace: str, pod: str) -> Any:
    flags = kubelet_flags(node.dirs, node.name, f"{namespace}/{pod}", drivers=[CPU])
    return standin.run("prepare", *flags)


def unprepare(standin: KubeletStandIn, node: Running, namespace: str, pod: str) -> Any:
    flags = kubelet_flags(node.dirs, node.name, f"{namespace}/{pod}", drivers=[CPU])
    return standin.run("unprepare", *flags)


def test_two_claims_share_a_socket_device_and_get_disjoint_cpus(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    node: Running,
    cpu_class: str,
    namespace: str,
) -> None:
    claims = [
        run_pod(control_plane, namespace, node, cpu_class, f"share-{i}", 12) for i in range(2)
    ]
    for c in claims:
        [result] = c["status"]["allocation"]["devices"]["results"]
        assert result["device"] == "cpu-socket-0"
        assert result["consumedCapacity"] == {"cpu": "12"}
        assert result.get("shareID")
    try:
        for i in range(2):
            done = prepare(kubelet_standin, node, namespace, f"share-{i}")
            assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        a, b = (prepared_cpus(node, c["metadata"]["uid"]) for c in claims)
        assert len(a) == len(b) == 12
        assert not (a & b)
        assert {node.topology.info(c).socket_id for c in a | b} == {0}
    finally:
        for i in range(2):
            unprepare(kubelet_standin, node, namespace, f"share-{i}")
    assert node.dirs.checkpoint(CPU) == {}


def test_per_claim_distributed_policy_spreads_over_numa_nodes(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    node: Running,
    cpu_class: str,
    namespace: str,
) -> None:
    cfg = {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig", "policy": "distributed"}
    packed = run_pod(control_plane, namespace, node, cpu_class, "packed", 64)
    spread = run_pod(control_plane, namespace, node, cpu_class, "spread", 64, cfg)
    try:
        for pod in ("packed", "spread"):
            done = prepare(kubelet_standin, node, namespace, pod)
            assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        per_numa = {
            name: Counter(
                node.topology.info(c).numa_node
                for c in prepared_cpus(node, claim["metadata"]["uid"])
            )
            for name, claim in (("packed", packed), ("spread", spread))
        }
        # 64 CPUs need more than one 48-CPU NUMA node: distributed splits them evenly,
        # packed fills whole nodes first.
        counts = sorted(per_numa["spread"].values())
        assert sum(counts) == 64
        assert len(counts) >= 2
        assert counts[-1] - counts[0] <= 1, per_numa
        assert per_numa["packed"] != per_numa["spread"], per_numa
    finally:
        for pod in ("packed", "spread"):
            unprepare(kubelet_standin, node, namespace, pod)


def test_invalid_cpu_config_fails_only_its_claim(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    node: Running,
    cpu_class: str,
    namespace: str,
) -> None:
    bad = {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig", "policy": "sideways"}
    run_pod(control_plane, namespace, node, cpu_class, "bad", 4, bad)
    good = run_pod(control_plane, namespace, node, cpu_class, "good", 4)
    try:
        failed = prepare(kubelet_standin, node, namespace, "bad")
        assert failed.exit_code != 0
        text = str(failed.doc)
        assert "policy" in text
        assert "sideways" in text
        ok = prepare(kubelet_standin, node, namespace, "good")
        assert ok.exit_code == 0, (ok.doc, ok.stderr[-2000:])
        assert len(prepared_cpus(node, good["metadata"]["uid"])) == 4
    finally:
        for pod in ("bad", "good"):
            unprepare(kubelet_standin, node, namespace, pod)
