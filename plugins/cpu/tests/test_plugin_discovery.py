"""CPU backend discovery on simulated sysfs trees: attributes, reserved and isolated CPUs."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.errors import ConfigInvalid
from drakit.host.startup import fast_tmp
from drakit.models import Device
from drakit.sim import get_profile
from drakit.testing import SimHost, SimNode, build_sim_node, open_host
from drakit.testing.plugin import HostFactory as KitHosts
from drakit_cpu.plugin import CpuPlugin

NUMA = "resource.kubernetes.io/numaNode"

HostFactory = Callable[..., SimHost]


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, SimNode]]:
    """Simulated nodes by profile name, built once per module in memory."""
    with tempfile.TemporaryDirectory(prefix="drakit-cpu-disc-", dir=fast_tmp()) as tmp:
        base = Path(tmp)
        out: dict[str, SimNode] = {}
        for name in ("minimal-1s", "epyc-genoa-2s", "epyc-genoa-2s-nps4", "spr-2s-snc2"):
            out[name] = build_sim_node(name, base / name, node_name="n1")
        spec = get_profile("minimal-1s")
        isolated = dataclasses.replace(
            spec, name="minimal-isolated", cpu=dataclasses.replace(spec.cpu, isolated=(3, 7))
        )
        out["minimal-isolated"] = build_sim_node(
            isolated, base / "minimal-isolated", node_name="n1"
        )
        yield out


@pytest.fixture(scope="module")
def roots(nodes: dict[str, SimNode]) -> dict[str, Path]:
    return {name: node.root for name, node in nodes.items()}


@pytest.fixture
def host(nodes: dict[str, SimNode], drakit_host: KitHosts) -> HostFactory:
    def make(profile: str, **cpu: Any) -> SimHost:
        return drakit_host({"plugins": {"cpu": cpu}}, nodes[profile])

    return make


def discover(h: SimHost) -> dict[str, Device]:
    return {key.device: dev for key, dev in h.discover().devices.items()}


def attrs(dev: Device) -> dict[str, Any]:
    return {k: v.value for k, v in dev.attributes.items()}


def plugin(h: SimHost) -> CpuPlugin:
    p = h.backends["cpu"]
    assert isinstance(p, CpuPlugin)
    return p


def test_grouped_numa_device_attributes_and_capacity(host: HostFactory) -> None:
    devs = discover(host("minimal-1s"))
    assert list(devs) == ["cpu-numa-0"]
    dev = devs["cpu-numa-0"]
    assert attrs(dev) == {
        NUMA: 0,
        "socket": 0,
        "die": 0,
        "l3": 0,
        "cpuCount": 8,
        "coreCount": 4,
        "numaNodeCount": 1,
        "threadsPerCore": 2,
        "smt": True,
        "isolated": False,
        "model": "Intel(R) Xeon(R) E-2334 CPU @ 3.40GHz",
    }
    cap = dev.capacity["cpu"]
    assert cap.value == "8"
    assert cap.request_policy is not None
    assert cap.request_policy.default == "1"
    assert cap.request_policy.valid_range is not None
    assert (cap.request_policy.valid_range.min, cap.request_policy.valid_range.step) == ("1", "1")
    assert dev.allow_multiple_allocations is True


def test_reserved_cpus_shrink_each_group(host: HostFactory) -> None:
    h = host("epyc-genoa-2s", reserved="0-1,192-193")
    devs = discover(h)
    assert devs["cpu-numa-0"].capacity["cpu"].value == "188"
    assert attrs(devs["cpu-numa-0"])["cpuCount"] == 188
    assert devs["cpu-numa-1"].capacity["cpu"].value == "192"
    group = plugin(h).groups["cpu-numa-0"]
    assert not group & {0, 1, 192, 193}
    assert len(group) == 188


def test_reserved_cpus_are_never_published_individually(host: HostFactory) -> None:
    devs = discover(host("minimal-1s", mode="individual", reserved="0,4"))
    assert sorted(devs, key=lambda n: int(n.split("-")[1])) == [
        f"cpu-{c}" for c in (1, 2, 3, 5, 6, 7)
    ]


def test_full_pcpus_only_drops_half_cores_and_steps_by_core(host: HostFactory) -> None:
    devs = discover(host("minimal-1s", reserved="0", full_pcpus_only=True))
    dev = devs["cpu-numa-0"]
    assert dev.capacity["cpu"].value == "6"  # cpu 4, the sibling of reserved 0, goes too
    policy = dev.capacity["cpu"].request_policy
    assert policy is not None
    assert policy.valid_range is not None
    assert (policy.default, policy.valid_range.min, policy.valid_range.step) == ("2", "2", "2")


def test_individual_attributes_on_genoa(host: HostFactory) -> None:
    devs = discover(host("epyc-genoa-2s", mode="individual"))
    assert len(devs) == 384
    # cpu 193 is the SMT sibling of cpu 1: kubelet's core id is the lowest thread.
    assert attrs(devs["cpu-193"]) == {
        NUMA: 0,
        "socket": 0,
        "die": 0,
        "l3": 0,
        "core": 1,
        "cpu": 193,
        "smt": True,
        "isolated": False,
        "model": "AMD EPYC 9654 96-Core Processor",
    }
    assert attrs(devs["cpu-8"])["l3"] == 1  # 8 cores per CCD
    assert attrs(devs["cpu-100"])[NUMA] == 1
    assert attrs(devs["cpu-100"])["socket"] == 1


def test_isolated_cpus_are_excluded_by_default(host: HostFactory) -> None:
    h = host("minimal-isolated")
    devs = discover(h)
    assert list(devs) == ["cpu-numa-0"]
    assert devs["cpu-numa-0"].capacity["cpu"].value == "6"
    assert not plugin(h).groups["cpu-numa-0"] & {3, 7}
    facts = plugin(h).facts
    assert facts is not None
    assert facts.isolated == {3, 7}


def test_isolated_cpus_published_apart(host: HostFactory) -> None:
    devs = discover(host("minimal-isolated", isolated_cpus="publish"))
    assert sorted(devs) == ["cpu-numa-0", "cpu-numa-0-isolated"]
    assert attrs(devs["cpu-numa-0-isolated"])["isolated"] is True
    assert devs["cpu-numa-0-isolated"].capacity["cpu"].value == "2"
    assert attrs(devs["cpu-numa-0"])["isolated"] is False
    single = discover(host("minimal-isolated", mode="individual", isolated_cpus="publish"))
    assert attrs(single["cpu-3"])["isolated"] is True
    assert attrs(single["cpu-2"])["isolated"] is False


def test_socket_groups_span_numa_nodes(host: HostFactory) -> None:
    devs = discover(host("epyc-genoa-2s-nps4", group_by="socket"))
    assert sorted(devs) == ["cpu-socket-0", "cpu-socket-1"]
    a = attrs(devs["cpu-socket-0"])
    assert a["numaNodeCount"] == 4
    assert NUMA not in a  # not one NUMA node: no numaNode attribute
    assert a["socket"] == 0
    assert a["cpuCount"] == 192


def test_l3_groups(host: HostFactory) -> None:
    devs = discover(host("epyc-genoa-2s", group_by="l3"))
    assert len(devs) == 24
    assert attrs(devs["cpu-l3-5"])["l3"] == 5
    assert attrs(devs["cpu-l3-5"])["cpuCount"] == 16
    # SPR: one socket-wide L3 spans both SNC NUMA nodes of the socket
    spr = discover(host("spr-2s-snc2", group_by="l3"))
    assert sorted(spr) == ["cpu-l3-0", "cpu-l3-1"]
    assert attrs(spr["cpu-l3-0"])["numaNodeCount"] == 2


def test_numa_distances_are_read(host: HostFactory) -> None:
    h = host("epyc-genoa-2s-nps4")
    discover(h)
    topo = plugin(h).topology
    assert topo is not None
    assert topo.numa_distance(0, 0) == 10
    assert topo.numa_distance(0, 1) == 12  # same socket
    assert topo.numa_distance(0, 4) == 32  # other socket


def test_smt_control_off_and_missing(roots: dict[str, Path]) -> None:
    tmp = Path(tempfile.mkdtemp(dir=fast_tmp()))
    root = tmp / "r"
    shutil.copytree(roots["minimal-1s"], root, symlinks=True)
    control = root / "sys/devices/system/cpu/smt/control"
    control.write_text("off\n")
    with open_host({"plugins": {"cpu": {}}}, SimNode(root, "minimal-1s", "n")) as h:
        assert attrs(discover(h)["cpu-numa-0"])["smt"] is False
        control.unlink()  # no control file: inferred from the siblings
        assert attrs(discover(h)["cpu-numa-0"])["smt"] is True
    shutil.rmtree(tmp)


@pytest.mark.parametrize(
    ("section", "path", "needle"),
    [
        ({"mode": "individual", "policy": "spread"}, "plugins.cpu.policy", "individual"),
        ({"mode": "individual", "group_by": "socket"}, "plugins.cpu.group_by", "individual"),
        ({"policy": "spread", "full_pcpus_only": True}, "plugins.cpu.full_pcpus_only", "spread"),
        ({"policy": "distributed", "prefer_uncore": True}, "plugins.cpu.prefer_uncore", "packed"),
        ({"group_size": 2}, "plugins.cpu.group_size", "distributed"),
        ({"reserved": "0-x"}, "plugins.cpu.reserved", "not a CPU list"),
        ({"isolated_cpus": "maybe"}, "plugins.cpu.isolated_cpus", "exclude"),
    ],
)
def test_node_settings_are_validated(
    nodes: dict[str, SimNode], section: dict[str, Any], path: str, needle: str
) -> None:
    with pytest.raises(ConfigInvalid) as info:
        open_host({"plugins": {"cpu": section}}, nodes["minimal-1s"])
    [(where, message)] = info.value.errors
    assert where == path
    assert needle in message


def test_group_size_must_keep_whole_cores_on_this_node(host: HostFactory) -> None:
    h = host("minimal-1s", policy="distributed", group_size=3, full_pcpus_only=True)
    with pytest.raises(ConfigInvalid) as info:
        h.discover()
    [(where, message)] = info.value.errors
    assert where == "plugins.cpu.group_size"
    assert "not a multiple of this node's 2 CPUs per core" in message


def test_valid_node_settings(host: HostFactory) -> None:
    h = host("minimal-1s", policy="distributed", group_size=2, full_pcpus_only=True)
    assert discover(h)["cpu-numa-0"].capacity["cpu"].value == "8"
