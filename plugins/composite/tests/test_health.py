"""A pair is unhealthy, and tainted, while one of its members is (the node's health poll).

The whole node (:class:`drakit.node.daemon.Node`, no cluster, no kubelet sockets) runs the NVIDIA
GPU, AINIC and composite backends under one driver on ``h200-8gpu-8ainic``. A NIC's link goes down
in the simulated sysfs, or a GPU gets an XID in the fake NVML (the backends' health seams);
nothing of drakit is mocked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drakit.host.settings import DrakitSettings
from drakit.node.daemon import UNHEALTHY_TAINT, Node
from drakit.testing import ClaimStore
from drakit_amd_ainic.sim import set_link
from drakit_nvidia_gpu.sim import inject_xid, load_nvml_description

DRIVER = "gpu-nic.example.com"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    settings = DrakitSettings(
        profile="h200-8gpu-8ainic",
        node_name="n",
        kubelet_dir=tmp_path / "k",
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "state",
        metrics={"enabled": False},
        health={"taint_unhealthy": True},
        plugins={
            "nvidia_gpu": {"driver": DRIVER},
            "amd_ainic": {"driver": DRIVER},
            "composite": {"driver": DRIVER},
        },
    )
    n = Node(settings, claims=ClaimStore(copy=False), serve_kubelet=False, boot_id="b")
    n.start()
    try:
        yield n
    finally:
        n.stop(grace=0)


def pair_of(node: Node, nic: str) -> str:
    inv = node.inventory
    assert inv is not None
    [pair] = [
        k.device
        for k, owner, d in inv.devices()
        if owner == "composite" and d.attributes["nic"].value == nic
    ]
    return pair


def test_a_pair_with_a_nic_whose_link_is_down_is_unhealthy_and_tainted(node: Node) -> None:
    pair = pair_of(node, "ainic-3")
    root = Path(node._the_host().node.sysfs_root)
    node.poll_health()
    assert {h.health for h in node.health[DRIVER].snapshot()} == {"Healthy"}
    set_link(root, "enp94s0", up=False)  # ainic-3
    node.poll_health()
    health = {h.device: h for h in node.health[DRIVER].snapshot()}
    assert health["ainic-3"].health == "Unhealthy"
    assert health[pair].health == "Unhealthy"
    assert health[pair].message == "member unhealthy: ainic-3: enp94s0: link down"
    sick = {d for d, h in health.items() if h.health == "Unhealthy"}
    assert sick == {"ainic-3", pair}  # the pair's GPU alone, other pairs: healthy
    [pool] = [p for p in node._desired() if p.driver == DRIVER]
    tainted = {d.name for d in pool.devices if UNHEALTHY_TAINT in d.taints}
    assert tainted == {"ainic-3", pair}
    set_link(root, "enp94s0", up=True)
    node.poll_health()
    assert {h.health for h in node.health[DRIVER].snapshot()} == {"Healthy"}
    [pool] = [p for p in node._desired() if p.driver == DRIVER]
    assert not [d.name for d in pool.devices if UNHEALTHY_TAINT in d.taints]


def test_a_pair_whose_gpu_has_a_critical_xid_is_unhealthy_and_carries_its_taint(
    node: Node,
) -> None:
    inv = node.inventory
    assert inv is not None
    [(pair, gpu)] = [
        (k.device, str(d.attributes["gpu"].value))
        for k, owner, d in inv.devices()
        if owner == "composite" and d.attributes["gpu"].value == "gpu-5"
    ]
    root = Path(node._the_host().node.sysfs_root)
    inject_xid(root, load_nvml_description(root).devices[5].uuid, 79)

    def sick() -> bool:
        node.poll_health()
        return {h.device: h.health for h in node.health[DRIVER].snapshot()}[pair] == "Unhealthy"

    deadline = time.monotonic() + 15
    while not sick():
        assert time.monotonic() < deadline, "the pair never turned unhealthy"
        time.sleep(0.05)
    health = {h.device: h for h in node.health[DRIVER].snapshot()}
    assert health[pair].message == f"member unhealthy: {gpu}: XID 79: GPU has fallen off the bus"
    [pool] = [p for p in node._desired() if p.driver == DRIVER]
    taints = {d.name: {t.key for t in d.taints} for d in pool.devices}
    # the GPU backend's own XID taint reaches the pair with the next discovery, core's too
    assert taints[pair] == taints[gpu] == {"gpu.nvidia.drakit.io/xid", UNHEALTHY_TAINT.key}
    assert not [n for n, t in taints.items() if t and n not in (pair, gpu)]
