"""The composite backend's hooks on the h200 profile: pair attributes, quota counters, classes."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from drakit.deviceclasses import render_device_classes
from drakit.inventory import build_inventory
from drakit.pluginhost import PluginHost
from drakit.runtime import fast_tmp
from drakit.testing import SimNode, build_sim_node, open_host

PLUGINS = {"cpu": {}, "nvidia_gpu": {}, "amd_ainic": {}, "composite": {}}
PAIRS = "pairs.composite.drakit.io"


@pytest.fixture(scope="module")
def node() -> Iterator[SimNode]:
    with tempfile.TemporaryDirectory(prefix="drakit-composite-", dir=fast_tmp()) as tmp:
        yield build_sim_node("h200-8gpu-8ainic", Path(tmp) / "root")


@pytest.fixture(scope="module")
def host(node: SimNode) -> Iterator[PluginHost]:
    with open_host({"plugins": PLUGINS}, node) as h:
        yield h.host


def test_pairs_carry_placement_member_and_quota_facts(host: PluginHost) -> None:
    found = host.discover()
    pairs = {k.device: d for k, d in found.devices.items() if k.driver == PAIRS}
    gpus = {k.device: d for k, d in found.devices.items() if k.driver == "gpu.nvidia.drakit.io"}
    assert sorted(pairs) == [f"pair-{i}" for i in range(8)]
    for name, dev in pairs.items():
        a = {k: v.value for k, v in dev.attributes.items()}
        gpu = gpus[str(a["gpu"])]
        assert a["coupling"] == "switch"  # every H200 shares a switch with an AINIC
        assert a["resource.kubernetes.io/numaNode"] == a["socket"]  # 1 NUMA node per socket
        assert (
            a["resource.kubernetes.io/pcieRoot"]
            == gpu.attributes["resource.kubernetes.io/pcieRoot"].value
        )
        assert a["gpuBusID"] == gpu.attributes["resource.kubernetes.io/pciBusID"].value
        [use] = dev.consumes_counters
        assert use.counter_set == name
        assert use.counters == {
            "gpu-memory": gpu.capacity["memory"].value,
            "nic-bandwidth": "400G",
        }
    sets = {cs.name: cs.counters for cs in found.counter_sets[(PAIRS, host.node.name)]}
    assert sets == {n: d.consumes_counters[0].counters for n, d in pairs.items()}
    assert sorted(
        {p.attributes["resource.kubernetes.io/numaNode"].value for p in pairs.values()}
    ) == [0, 1]


def test_pairs_and_their_counters_render_into_valid_slices(host: PluginHost) -> None:
    slices = [s for s in build_inventory(host).slices() if s["spec"]["driver"] == PAIRS]
    assert sum(len(s["spec"].get("devices") or []) for s in slices) == 8
    assert sum(len(s["spec"].get("sharedCounters") or []) for s in slices) == 8


def test_quota_counters_can_be_turned_off(node: SimNode) -> None:
    plugins = {**PLUGINS, "composite": {"quota_counters": False, "numa_classes": 0}}
    with open_host({"plugins": plugins}, node) as h:
        found = h.discover()
        classes = h.host.device_classes()["composite"]
    assert not found.counter_sets.get((PAIRS, h.host.node.name))
    assert [c.name for c in classes or []] == ["gpu-nic-pair"]


def test_device_classes_select_the_configured_driver(host: PluginHost) -> None:
    objs = render_device_classes(
        {"composite": "pairs.example.com"}, {"composite": host.device_classes()["composite"]}, {}
    )
    assert [o["metadata"]["name"] for o in objs] == [
        "gpu-nic-pair",
        "gpu-nic-pair-numa0",
        "gpu-nic-pair-numa1",
    ]
    for o in objs:
        assert o["spec"]["selectors"][0] == {
            "cel": {"expression": 'device.driver == "pairs.example.com"'}
        }
    assert objs[2]["spec"]["selectors"][1]["cel"]["expression"].endswith(".numaNode == 1")
