"""ResourceSlicePublisher against the real control plane.

What a node sees: slices published for simulated hardware, no writes in steady state, one
pool's generation bumped when one device changes, slices deleted or edited by someone else
restored within seconds (the watch), an unreachable API server survived with backoff and
recovered from, a 1,000-device pool split and accepted, and every simulated profile's slices
accepted by the API server (dry run).

The API server "outage" is a TCP proxy between the publisher and the API server that the test
closes and reopens: the shared control plane keeps running for the other tests.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import Proxy, kubeconfig_via

from drakit.errors import PermanentError, RetryableError
from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.kube import KubeClient
from drakit.models import CounterConsumption, CounterSet, Device
from drakit.publish.diff import dropped_fields
from drakit.publish.publisher import ResourceSlicePublisher
from drakit.publish.render import PoolSpec, render_pool
from drakit.sim import list_profiles

pytestmark = pytest.mark.e2e

logger = logging.getLogger(__name__)

DRIVER = "gpu.publisher.e2e.drakit.dev"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


# ------------------------------------------------------------------ fixtures


@pytest.fixture
def node(fake_node: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return fake_node()


class Publishing:
    """A publisher running in a thread; stopped (slices left in place) at teardown."""

    def __init__(self, publisher: ResourceSlicePublisher) -> None:
        self.publisher = publisher
        self.stop = threading.Event()
        self.thread = threading.Thread(target=publisher.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> ResourceSlicePublisher:
        self.thread.start()
        wait_for(lambda: self.publisher.synced, timeout=30, what="first sync")
        return self.publisher

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "publisher did not stop"


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[Proxy]:
    p = Proxy(("127.0.0.1", control_plane.api_port))
    p.start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def via_proxy(control_plane: ControlPlane, proxy: Proxy, tmp_path: Path) -> Iterator[KubeClient]:
    """A client that reaches the API server through ``proxy`` (stop it to cut the client off)."""
    client = KubeClient.from_kubeconfig(
        kubeconfig_via(control_plane, proxy.port, tmp_path / "kubeconfig")
    )
    try:
        yield client
    finally:
        client.close()


# ------------------------------------------------------------------- helpers


def gpu(i: int, mem: str = "80Gi") -> Device:
    return Device(name=f"gpu-{i}", attributes={"index": i}, capacity={"memory": mem})


def pools_for(node_name: str, main: list[Device], extra: list[Device]) -> list[PoolSpec]:
    return [
        PoolSpec(driver=DRIVER, node=node_name, pool=node_name, devices=tuple(main)),
        PoolSpec(driver=DRIVER, node=node_name, pool=f"{node_name}-extra", devices=tuple(extra)),
    ]


def listed(cp: ControlPlane, node_name: str) -> dict[str, dict[str, Any]]:
    """This node's slices as the API server has them (through the admin client)."""
    sel = urllib.parse.quote(f"spec.nodeName={node_name}")
    items = cp.api("GET", f"{SLICES}?fieldSelector={sel}")["items"]
    return {o["metadata"]["name"]: o for o in items}


def device_names(cp: ControlPlane, node_name: str) -> list[str]:
    """The names of the devices in this node's slices, sorted."""
    slices = listed(cp, node_name).values()
    return sorted(d["name"] for o in slices for d in o["spec"].get("devices", []))


def publisher(
    kube: KubeClient, node: dict[str, Any], desired: Callable[[], Sequence[PoolSpec]], **kw: Any
) -> ResourceSlicePublisher:
    drivers = kw.pop("drivers", {DRIVER})
    return ResourceSlicePublisher(
        kube,
        node["metadata"]["name"],
        desired,
        drivers=drivers,
        interval=kw.pop("interval", 60.0),
        **kw,
    )


def last_error(pub: ResourceSlicePublisher) -> str | None:
    """Read through a call, so mypy does not carry an earlier narrowing over."""
    return pub.last_error


def until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll every 20 ms; return the seconds it took."""
    began = time.monotonic()
    wait_for(predicate, timeout=timeout, interval=0.02, what=what)
    return time.monotonic() - began


# --------------------------------------------------------------------- tests


def test_publishes_a_simulated_profile_then_writes_nothing(
    control_plane: ControlPlane, kube: KubeClient, node: dict[str, Any]
) -> None:
    name = node["metadata"]["name"]
    settings = DrakitSettings(profile="dgx-h100", node_name=name)
    with open_host(settings) as host:
        inventory = build_inventory(host)
        drivers = {p.driver for p in inventory.pools}
        pub = publisher(kube, node, lambda: build_inventory(host).pools, drivers=drivers)
        first = pub.sync_once()
        assert first.creates == first.slices > 0
        assert (first.updates, first.deletes) == (0, 0)
        rounds = [pub.sync_once() for _ in range(3)]  # re-discovers every round
    assert [r.writes for r in rounds] == [0, 0, 0]
    assert pub.writes.total == first.creates

    slices = listed(control_plane, name)
    assert len(slices) == first.slices
    published = {
        (o["spec"]["driver"], d["name"])
        for o in slices.values()
        for d in o["spec"].get("devices", [])
    }
    wanted = {(p.driver, d.name) for p in inventory.pools for d in p.devices}
    assert published == wanted
    for o in slices.values():
        assert o["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": node["metadata"]["uid"],
                "controller": True,
            }
        ]
        assert o["spec"]["pool"]["generation"] == 0


def test_steady_state_makes_zero_writes_while_running(
    kube: KubeClient, node: dict[str, Any]
) -> None:
    name = node["metadata"]["name"]
    pools = pools_for(name, [gpu(i) for i in range(200)], [gpu(i) for i in range(4)])
    pub = publisher(kube, node, lambda: pools, interval=0.3)
    with Publishing(pub):
        created = pub.writes.copy()
        syncs = pub.syncs
        wait_for(lambda: pub.syncs >= syncs + 5, timeout=30, what="five more sync rounds")
        assert pub.writes == created
    assert created.total == 3


def test_device_change_bumps_one_pool_with_minimal_writes(
    control_plane: ControlPlane, kube: KubeClient, node: dict[str, Any]
) -> None:
    name = node["metadata"]["name"]
    main = [gpu(i) for i in range(200)]  # two slices
    state = {"pools": pools_for(name, main, [gpu(i) for i in range(4)])}
    pub = publisher(kube, node, lambda: state["pools"])
    pub.sync_once()
    before = listed(control_plane, name)

    main[150] = gpu(150, mem="40Gi")
    state["pools"] = pools_for(name, main, [gpu(i) for i in range(4)])
    result = pub.sync_once()
    assert (result.creates, result.updates, result.deletes) == (0, 2, 0)
    assert result.generations == {(DRIVER, name): 1, (DRIVER, f"{name}-extra"): 0}
    after = listed(control_plane, name)
    for slice_name, obj in after.items():
        pool = obj["spec"]["pool"]
        if pool["name"] == name:
            assert pool["generation"] == 1
            assert pool["resourceSliceCount"] == 2
        else:  # the other pool was not touched at all
            assert pool["generation"] == 0
            assert (
                obj["metadata"]["resourceVersion"]
                == before[slice_name]["metadata"]["resourceVersion"]
            )
    assert pub.sync_once().writes == 0


def test_deleted_slices_are_restored_within_5s(
    control_plane: ControlPlane, kube: KubeClient, node: dict[str, Any]
) -> None:
    name = node["metadata"]["name"]
    pools = pools_for(name, [gpu(i) for i in range(200)], [gpu(i) for i in range(4)])
    with Publishing(publisher(kube, node, lambda: pools)) as pub:
        names = set(listed(control_plane, name))
        victim = sorted(names)[0]
        control_plane.api("DELETE", f"{SLICES}/{victim}")
        took = until(lambda: victim in listed(control_plane, name), 5, f"{victim} restored")
        logger.info("one deleted slice restored after %.2fs", took)

        # what the kubelet does at its start: DeleteCollection of all the node's slices
        sel = urllib.parse.quote(f"spec.nodeName={name}")
        control_plane.api("DELETE", f"{SLICES}?fieldSelector={sel}")
        took_all = until(lambda: set(listed(control_plane, name)) == names, 5, "all restored")
        logger.info("wiped slices (kubelet start) restored after %.2fs", took_all)
        gens = {o["spec"]["pool"]["generation"] for o in listed(control_plane, name).values()}
        assert gens == {0}, "restoring is not a content change"
        assert pub.last_error is None


def test_edited_slice_is_restored(
    control_plane: ControlPlane, kube: KubeClient, node: dict[str, Any]
) -> None:
    name = node["metadata"]["name"]
    pools = pools_for(name, [gpu(i) for i in range(10)], [gpu(i) for i in range(4)])
    with Publishing(publisher(kube, node, lambda: pools)):
        slice_name = next(n for n, o in listed(control_plane, name).items() if "extra" in n)
        obj = listed(control_plane, name)[slice_name]
        obj["spec"]["devices"][0]["capacity"]["memory"]["value"] = "1Gi"
        obj["spec"]["devices"].pop()
        obj["metadata"]["ownerReferences"] = []
        edited = control_plane.api("PUT", f"{SLICES}/{slice_name}", obj)

        def restored() -> bool:
            cur = listed(control_plane, name)[slice_name]
            devices = cur["spec"]["devices"]
            return (
                cur["metadata"]["resourceVersion"] != edited["metadata"]["resourceVersion"]
                and len(devices) == 4
                and devices[0]["capacity"]["memory"]["value"] == "80Gi"
                and bool(cur["metadata"].get("ownerReferences"))
            )

        took = until(restored, 5, "edited slice restored")
        logger.info("edited slice restored after %.2fs", took)


def test_unreachable_api_server_backs_off_and_recovers(
    control_plane: ControlPlane,
    node: dict[str, Any],
    proxy: Proxy,
    via_proxy: KubeClient,
) -> None:
    name = node["metadata"]["name"]
    pools = pools_for(name, [gpu(i) for i in range(10)], [gpu(i) for i in range(4)])
    pub = publisher(via_proxy, node, lambda: pools, interval=1.0)
    with Publishing(pub):
        proxy.stop()  # the API server "goes away" for this publisher
        # Work for when it comes back: a slice someone deletes meanwhile.
        victim = sorted(listed(control_plane, name))[0]
        control_plane.api("DELETE", f"{SLICES}/{victim}")
        wait_for(lambda: not pub.synced, timeout=10, what="the publisher to notice")
        errors_at_outage = pub.sync_errors
        time.sleep(6)
        attempts = pub.sync_errors - errors_at_outage
        assert pub.last_error is not None
        assert "cannot reach the API server" in pub.last_error
        # 0.5 s doubling: 0.5 + 1 + 2 + 4 > 6 s => at most ~5 attempts in 6 s, not hundreds
        assert 1 <= attempts <= 6, attempts

        proxy.start()  # same port
        back = time.monotonic()
        took = until(lambda: victim in listed(control_plane, name), 40, "recovery")
        wait_for(lambda: pub.synced, timeout=10, what="synced again")
        logger.info("recovered %.2fs after the API server came back", took)
        assert last_error(pub) is None
        assert time.monotonic() - back < 40


def test_the_first_successful_sync_calls_back_once(
    kube: KubeClient, node: dict[str, Any], proxy: Proxy, via_proxy: KubeClient
) -> None:
    """``on_first_sync`` (drakit node trims its C heap there) runs once, after a sync that
    succeeded, never after a failed one; a callback that raises does not fail the sync."""
    name = node["metadata"]["name"]
    pools = pools_for(name, [gpu(i) for i in range(2)], [])
    calls: list[int] = []
    pub = publisher(via_proxy, node, lambda: pools, on_first_sync=lambda: calls.append(1))
    proxy.stop()
    with pytest.raises(RetryableError):
        pub.sync_once()
    assert calls == []
    proxy.start()
    pub.sync_once()
    pub.sync_once()
    assert calls == [1]

    def boom() -> None:
        raise RuntimeError("boom")

    again = publisher(kube, node, lambda: pools, on_first_sync=boom)
    again.sync_once()
    assert again.synced
    assert last_error(again) is None


def test_pools_just_discovered_are_published_first_without_discovering_again(
    control_plane: ControlPlane, kube: KubeClient, node: dict[str, Any]
) -> None:
    """``discovered`` (drakit node discovers before it serves the kubelet) is the first round's
    result; the next round discovers; a trigger before the first round wins over it."""
    name = node["metadata"]["name"]
    calls: list[int] = []
    later = pools_for(name, [gpu(i) for i in range(3)], [])

    def desired() -> list[PoolSpec]:
        calls.append(1)
        return later

    pub = publisher(kube, node, desired, discovered=pools_for(name, [gpu(0)], []))
    pub.sync_once()
    assert calls == []
    assert device_names(control_plane, name) == ["gpu-0"]
    pub.sync_once()  # rediscover=True: the given result is used once
    assert calls == [1]
    assert len(device_names(control_plane, name)) == 3

    other = publisher(kube, node, desired, discovered=pools_for(name, [gpu(0)], []))
    other.trigger(rediscover=True)
    other.sync_once()
    assert calls == [1, 1]


def test_pools_just_discovered_are_checked_like_a_discovery(
    kube: KubeClient, node: dict[str, Any]
) -> None:
    name = node["metadata"]["name"]
    stray = [PoolSpec(driver=DRIVER, node="another-node", pool="p", devices=(gpu(0),))]
    pub = publisher(kube, node, lambda: pools_for(name, [gpu(0)], []), discovered=stray)
    with pytest.raises(PermanentError, match="is for node 'another-node'"):
        pub.sync_once()
    pub.sync_once()  # the round after discovers
    assert pub.synced


def test_thousand_device_pool_is_split_and_accepted(
    control_plane: ControlPlane, kube: KubeClient, node: dict[str, Any]
) -> None:
    name = node["metadata"]["name"]
    devices = tuple(gpu(i) for i in range(1000))
    pools = [PoolSpec(driver=DRIVER, node=name, pool=name, devices=devices)]
    pub = publisher(kube, node, lambda: pools)
    result = pub.sync_once()
    assert result.creates == 8  # ceil(1000 / 128)
    slices = listed(control_plane, name)
    assert len(slices) == 8
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in slices.values()} == {8}
    assert sum(len(o["spec"]["devices"]) for o in slices.values()) == 1000
    assert max(len(o["spec"]["devices"]) for o in slices.values()) == 128
    assert pub.sync_once().writes == 0


def test_partitionable_pool_with_counters_is_accepted(
    control_plane: ControlPlane, kube: KubeClient, node: dict[str, Any]
) -> None:
    """Counter sets go in their own slice (1.35+) and devices reference them across slices."""
    name = node["metadata"]["name"]
    counters = (CounterSet(name="gpu-0-counters", counters={"memory": "80Gi"}),)
    parts = tuple(
        Device(
            name=f"gpu-0-part-{i}",
            capacity={"memory": "20Gi"},
            consumes_counters=(
                CounterConsumption(counter_set="gpu-0-counters", counters={"memory": "20Gi"}),
            ),
        )
        for i in range(4)
    )
    pools = [PoolSpec(driver=DRIVER, node=name, pool=name, devices=parts, counter_sets=counters)]
    pub = publisher(kube, node, lambda: pools)
    assert pub.sync_once().creates == 2
    assert pub.dropped == {}
    assert pub.sync_once().writes == 0


def test_slices_go_with_their_node(
    control_plane: ControlPlane, kube: KubeClient, fake_node: Callable[..., dict[str, Any]]
) -> None:
    node = fake_node()
    name = node["metadata"]["name"]
    pools = pools_for(name, [gpu(0)], [gpu(1)])
    publisher(kube, node, lambda: pools).sync_once()
    assert len(listed(control_plane, name)) == 2
    control_plane.api("DELETE", f"/api/v1/nodes/{name}")
    took = until(lambda: not listed(control_plane, name), 60, "garbage collection")
    logger.info("slices garbage-collected %.2fs after their node was deleted", took)


@pytest.mark.parametrize("profile", list_profiles())
def test_every_profile_is_accepted_by_the_api_server(kube: KubeClient, profile: str) -> None:
    node_name = f"dry-{profile}"
    with open_host(DrakitSettings(profile=profile, node_name=node_name)) as host:
        pools = build_inventory(host).pools
    assert pools, f"{profile}: nothing discovered"
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node_name,
        "uid": "0" * 8,
        "controller": True,
    }
    for spec in pools:
        for obj in render_pool(spec, generation=0):
            obj["metadata"]["ownerReferences"] = [owner]
            got = kube.create_resource_slice(obj, dry_run=True)
            assert dropped_fields(obj["spec"], got["spec"]) == [], obj["metadata"]["name"]
