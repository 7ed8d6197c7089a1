"""The composite backend's hooks on the h200 profile: one driver, shared counters, classes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drakit.deviceclasses import render_device_classes
from drakit.errors import ConfigInvalid
from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host

SHARED = "gpu-nic.example.com"
PLUGINS = {
    "cpu": {},
    "nvidia_gpu": {"driver": SHARED},
    "amd_ainic": {"driver": SHARED},
    "composite": {"driver": SHARED},
}


@pytest.fixture(scope="module")
def host() -> Iterator[PluginHost]:
    with open_host(DrakitSettings(profile="h200-8gpu-8ainic", plugins=PLUGINS)) as h:
        yield h


def test_pairs_consume_exactly_what_their_members_consume(host: PluginHost) -> None:
    found = host.discover()
    mine = {k.device: d for k, d in found.devices.items() if k.driver == SHARED}
    owners = {k.device: found.owners[k] for k in found.devices if k.driver == SHARED}
    pairs = {n: d for n, d in mine.items() if owners[n] == "composite"}
    assert sorted(pairs) == [f"pair-{i}" for i in range(8)]
    sets = {cs.name: cs.counters for cs in found.counter_sets[(SHARED, host.node.name)]}
    # every GPU and every NIC is a counter set of the one pool; the lone device takes it whole
    for n, d in mine.items():
        if owners[n] == "composite":
            continue
        [use] = d.consumes_counters
        assert sets[use.counter_set] == use.counters
    gpu_sets, nic_sets = set(), set()
    for dev in pairs.values():
        a = {k: v.value for k, v in dev.attributes.items()}
        gpu, nic = mine[str(a["gpu"])], mine[str(a["nic"])]
        assert (owners[str(a["gpu"])], owners[str(a["nic"])]) == ("nvidia_gpu", "amd_ainic")
        assert dev.consumes_counters == (*gpu.consumes_counters, *nic.consumes_counters)
        assert a["type"] == "gpu-nic-pair"
        assert a["coupling"] == "switch"  # every H200 shares a switch with an AINIC
        assert a["resource.kubernetes.io/numaNode"] == a["socket"]  # 1 NUMA node per socket
        assert a["gpuBusID"] == gpu.attributes["resource.kubernetes.io/pciBusID"].value
        # the quota facts Kueue charges: the GPU's memory, the NIC's bandwidth
        assert dev.consumes_counters[0].counters == {"memory": gpu.capacity["memory"].value}
        assert dev.consumes_counters[1].counters == {"bandwidth": "400"}
        gpu_sets.add(dev.consumes_counters[0].counter_set)
        nic_sets.add(dev.consumes_counters[1].counter_set)
    assert len(gpu_sets) == len(nic_sets) == 8  # no two pairs share a member
    assert len(sets) == 16


def test_pairs_and_members_render_into_valid_slices_of_one_pool(host: PluginHost) -> None:
    slices = [s for s in build_inventory(host).slices() if s["spec"]["driver"] == SHARED]
    assert {s["spec"]["pool"]["name"] for s in slices} == {host.node.name}
    assert sum(len(s["spec"].get("devices") or []) for s in slices) == 24
    assert sum(len(s["spec"].get("sharedCounters") or []) for s in slices) == 16
    assert all(len(s["spec"].get("sharedCounters") or []) <= 8 for s in slices)
    assert all(not (s["spec"].get("devices") and s["spec"].get("sharedCounters")) for s in slices)


def test_device_classes_tell_gpus_nics_and_pairs_apart_by_type(host: PluginHost) -> None:
    objs = render_device_classes(host.driver_names(), host.device_classes(), {})
    sel = {
        o["metadata"]["name"]: [s["cel"]["expression"] for s in o["spec"]["selectors"]]
        for o in objs
    }
    # one selector per class: the driver test first, then the plugin's tests (benchmarks/
    # README.md, "Fleet scale": the scheduler evaluates one expression per device, not several)
    driver = f'device.driver == "{SHARED}"'
    attr = f'device.attributes["{SHARED}"].type in '
    assert sel["cpu"] == ['device.driver == "cpu.drakit.io"']
    assert sel["nvidia-gpu"] == [f'{driver} && ({attr}["gpu","mig"])']
    assert sel["amd-ainic"] == [f'{driver} && ({attr}["pf","vf","shared"])']
    assert sel["gpu-nic-pair"] == [f'{driver} && ({attr}["gpu-nic-pair"])']
    (numa1,) = sel["gpu-nic-pair-numa1"]
    assert numa1.startswith(f'{driver} && ({attr}["gpu-nic-pair"]) && (')
    assert numa1.endswith(".numaNode == 1)")


def test_members_under_another_driver_are_refused_naming_both_sections() -> None:
    plugins = {**PLUGINS, "amd_ainic": {"driver": "ainic.amd.drakit.io"}}
    with (
        pytest.raises(ConfigInvalid) as e,
        open_host(DrakitSettings(profile="h200-8gpu-8ainic", plugins=plugins)),
    ):
        pass
    [(path, message)] = e.value.errors
    assert path == "plugins.amd_ainic.driver"
    assert "'ainic.amd.drakit.io'" in message
    assert f"{SHARED!r}" in message
    assert "set plugins.amd_ainic.driver and plugins.composite.driver to the same name" in message


def test_members_without_a_driver_publish_under_the_composite_driver() -> None:
    plugins = {"nvidia_gpu": {}, "amd_ainic": {}, "composite": {"driver": SHARED}}
    with open_host(DrakitSettings(profile="h200-8gpu-8ainic", plugins=plugins)) as h:
        assert h.driver_names() == dict.fromkeys(plugins, SHARED)
        found = h.discover()
    assert {k.driver for k in found.devices} == {SHARED}
    assert sum(o == "composite" for o in found.owners.values()) == 8


def test_a_composite_without_nics_publishes_no_pairs() -> None:
    plugins = {"nvidia_gpu": {"driver": SHARED}, "composite": {"driver": SHARED}}
    with open_host(DrakitSettings(profile="h200-8gpu-8ainic", plugins=plugins)) as h:
        found = h.discover()
    assert set(found.owners.values()) == {"nvidia_gpu"}
    assert len(found.devices) == 8


def test_without_a_composite_members_publish_no_extra_counters() -> None:
    plugins = {"nvidia_gpu": {}, "amd_ainic": {}}
    with open_host(DrakitSettings(profile="h200-8gpu-8ainic", plugins=plugins)) as h:
        found = h.discover()
        classes = h.device_classes()
    assert not found.counter_sets
    assert all(not d.consumes_counters for d in found.devices.values())
    assert classes == {"nvidia_gpu": None, "amd_ainic": None}


def test_the_defaults_put_members_and_pairs_under_one_driver() -> None:
    with open_host(DrakitSettings(profile="mi300x-8gpu-8ainic")) as h:
        drivers = h.driver_names()
        found = h.discover()
    shared = drivers["composite"]
    assert drivers["amd_gpu"] == drivers["amd_ainic"] == drivers["nvidia_gpu"] == shared
    pairs = [k for k, p in found.owners.items() if p == "composite"]
    assert len(pairs) == 8  # MI300X GPUs pair with the default gpu_plugins
    gpus = {found.devices[k].attributes["gpu"].value for k in pairs}
    assert all(found.owners[k] == "amd_gpu" for k in found.devices if k.device in gpus)
