"""The kit's dropped fields: what an API server with feature gates off drops, told to the backend.

``SimHost.drop_fields`` / the ``drakit_gates_off`` fixture report each dropped field of the
node's slices with the gate that guards it, and hand the backend the names the node's
publisher would; the NVIDIA backend then publishes whole GPUs only (its own reaction, not the
kit's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drakit.sim import get_profile
from drakit.testing import DroppedFields, SimHost, build_sim_node, fields_dropped, open_host
from drakit.testing.plugin import GatesOff, HostFactory, SimNodeFactory
from drakit_nvidia_gpu.sim import with_mig_enabled

GPU = "gpu.nvidia.drakit.io"
CONFIG = {"plugins": {"nvidia_gpu": {"health_watch": False}}}


def test_partitions_dropped_by_a_server_without_the_gate_are_reported_and_told(
    drakit_sim_node: SimNodeFactory, drakit_host: HostFactory, drakit_gates_off: GatesOff
) -> None:
    node = drakit_sim_node(with_mig_enabled(get_profile("dgx-h100"), {0}), node_name="n1")
    host = drakit_host(CONFIG, node)
    before = host.published()
    assert any(d.consumes_counters for d in before.devices)
    report = drakit_gates_off(host, "DRAPartitionableDevices")
    assert isinstance(report, DroppedFields)
    assert report.names(GPU) == {"consumesCounters", "sharedCounters"}
    assert set(report.paths.values()) == {"DRAPartitionableDevices"}
    assert any(p.endswith(".consumesCounters") for p in report.paths), report.paths
    # the backend reacts as on a node: whole GPUs only, no counters, no MIG devices
    after = host.published()
    assert not any(d.consumes_counters for d in after.devices)
    assert {d.attribute("type") for d in after.devices} == {"gpu"}
    assert not after.counter_sets


def test_a_gate_nothing_uses_drops_nothing_and_an_unknown_gate_is_named(tmp_path: Path) -> None:
    node = build_sim_node("dgx-h100", tmp_path, node_name="n1")
    with open_host(CONFIG, node) as host:
        assert isinstance(host, SimHost)
        report = host.drop_fields({"DRADeviceTaints"})  # no taints on healthy GPUs
        assert not report
        assert report.names(GPU) == frozenset()
        with pytest.raises(ValueError, match=r"unknown feature gate.*DRAPartitionable"):
            host.drop_fields({"DRAPartitionable"})


def test_fields_dropped_on_plain_slices() -> None:
    sent: dict[str, Any] = {
        "metadata": {"name": "n1-acme-0"},
        "spec": {
            "driver": "acme.example.com",
            "devices": [
                {"name": "a", "taints": [{"key": "k", "effect": "NoSchedule"}]},
                {"name": "b", "allowMultipleAllocations": True},
            ],
        },
    }
    report = fields_dropped([sent], {"DRADeviceTaints", "DRAConsumableCapacity"})
    assert report.paths == {
        "n1-acme-0: spec.devices[0].taints": "DRADeviceTaints",
        "n1-acme-0: spec.devices[1].allowMultipleAllocations": "DRAConsumableCapacity",
    }
    assert report.names("acme.example.com") == {"taints", "allowMultipleAllocations"}
    assert sent["spec"]["devices"][0]["taints"]  # the input is left as it was
