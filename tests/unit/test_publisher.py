"""ResourceSlicePublisher against an in-memory API server (the algorithm, without a cluster).

The e2e tests (tests/e2e/test_publisher.py) run the same scenarios against a real
kube-apiserver; these pin the decisions: which writes, which generation, which error.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import kubernetes.client
import pytest

from drakit.errors import PermanentError, RetryableError, SliceValidationError
from drakit.kube import ConflictError, KubeClient, NotFoundError
from drakit.models import CounterSet, Device, DeviceTaint
from drakit.publish.diff import dropped_fields, gate_for_path, semantically_equal
from drakit.publish.publisher import WATCH_RETRY_MAX, DroppedFieldsError, ResourceSlicePublisher
from drakit.publish.render import PoolSpec

NODE = "node-a"
DRIVER = "gpu.example.com"
OTHER = "nic.example.com"


class FakeApi(KubeClient):
    """Just enough of an API server: resourceVersions, UIDs, preconditions, dropped fields."""

    def __init__(self) -> None:
        # the HTTP methods are overridden; the client only needs a base URL (a closed port)
        super().__init__(
            kubernetes.client.ApiClient(kubernetes.client.Configuration(host="https://127.0.0.1:9"))
        )
        self.objects: dict[str, dict[str, Any]] = {}
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self.down = False
        self.drop: set[str] = set()  # device fields a "disabled gate" drops
        self.calls: list[str] = []
        self.events: list[tuple[str, str]] = []

    def _check(self) -> None:
        if self.down:
            raise RetryableError("cannot reach the API server: connection refused")

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        for dev in obj["spec"].get("devices") or []:
            for f in self.drop:
                dev.pop(f, None)
            for t in dev.get("taints") or []:
                t.setdefault("timeAdded", "2026-01-01T00:00:00Z")
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)

    def get_node(
        self, name: str, *, timeout: float | tuple[float, float] | None = None
    ) -> dict[str, Any] | None:
        self._check()
        return {"metadata": {"name": name, "uid": "node-uid"}}

    def list_resource_slices(
        self, node_name: str, driver: str | None = None
    ) -> list[dict[str, Any]]:
        self._check()
        self.calls.append("list")
        return [
            copy.deepcopy(o)
            for o in self.objects.values()
            if o["spec"].get("nodeName") == node_name
            and (driver is None or o["spec"]["driver"] == driver)
        ]

    def create_resource_slice(
        self, obj: Mapping[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        self._check()
        self.calls.append("create")
        name = obj["metadata"]["name"]
        if name in self.objects:
            raise ConflictError(f"create ResourceSlice {name}: already exists")
        new = copy.deepcopy(dict(obj))
        new["metadata"]["uid"] = f"uid-{next(self._uid)}"
        new["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
        return self._store(new)

    def update_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self._check()
        self.calls.append("update")
        name = obj["metadata"]["name"]
        cur = self.objects.get(name)
        if cur is None:
            raise NotFoundError(name)
        if obj["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise ConflictError(f"update ResourceSlice {name}: the object has been modified")
        new = copy.deepcopy(dict(obj))
        new["metadata"]["uid"] = cur["metadata"]["uid"]
        return self._store(new)

    def delete_resource_slice(
        self, name: str, uid: str | None = None, *, resource_version: str | None = None
    ) -> None:
        self._check()
        self.calls.append("delete")
        cur = self.objects.get(name)
        if cur is None:
            return
        if uid and cur["metadata"]["uid"] != uid:
            raise ConflictError("uid precondition failed")
        del self.objects[name]

    def watch_resource_slices(
        self,
        node_name: str,
        stop_event: threading.Event,
        timeout_seconds: int = 300,
        *,
        driver: str | None = None,
        resource_version: str | None = None,
        on_connect: Callable[[], None] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        stop_event.wait(0.05)
        return iter(())

    def create_event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Warning",
        *,
        component: str = "drakit",
    ) -> dict[str, Any]:
        self.events.append((reason, message))
        return {}

    def edit(self, name: str, fn: Callable[[dict[str, Any]], None]) -> None:
        """Someone else edits a slice."""
        obj = copy.deepcopy(self.objects[name])
        fn(obj)
        self._store(obj)


def gpu(i: int, mem: str = "80Gi", **kw: Any) -> Device:
    return Device(name=f"gpu-{i}", attributes={"index": i}, capacity={"memory": mem}, **kw)


class Desired:
    def __init__(self) -> None:
        self.pools: dict[tuple[str, str], PoolSpec] = {}
        self.fail: Exception | None = None

    def set(self, driver: str, pool: str, devices: list[Device]) -> None:
        self.pools[(driver, pool)] = PoolSpec(
            driver=driver, node=NODE, pool=pool, devices=tuple(devices)
        )

    def __call__(self) -> list[PoolSpec]:
        if self.fail is not None:
            raise self.fail
        return list(self.pools.values())


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def desired() -> Desired:
    d = Desired()
    d.set(DRIVER, NODE, [gpu(i) for i in range(200)])  # two slices (128 + 72)
    d.set(DRIVER, "extra", [gpu(i) for i in range(3)])
    return d


def make(api: FakeApi, desired: Desired) -> ResourceSlicePublisher:
    return ResourceSlicePublisher(api, NODE, desired, drivers={DRIVER}, interval=60)


def synced(pub: ResourceSlicePublisher) -> bool:
    """Read the flag through a call, so mypy does not carry an earlier narrowing over."""
    return pub.synced


def gens(api: FakeApi) -> dict[str, int]:
    return {n: o["spec"]["pool"]["generation"] for n, o in sorted(api.objects.items())}


def test_first_sync_creates_then_steady_state_writes_nothing(
    api: FakeApi, desired: Desired
) -> None:
    pub = make(api, desired)
    r = pub.sync_once()
    assert (r.creates, r.updates, r.deletes) == (3, 0, 0)
    assert pub.synced
    assert pub.last_error is None
    for o in api.objects.values():
        assert o["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": NODE,
                "uid": "node-uid",
                "controller": True,
            }
        ]
        assert o["spec"]["pool"]["generation"] == 0
    for _ in range(5):
        assert pub.sync_once().writes == 0
    assert pub.writes.total == 3


def test_successor_adopts_without_writes(api: FakeApi, desired: Desired) -> None:
    make(api, desired).sync_once()
    api.calls.clear()
    assert make(api, desired).sync_once().writes == 0
    assert api.calls == ["list"]


def test_content_change_bumps_only_that_pool(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    pub.sync_once()
    desired.set(DRIVER, NODE, [gpu(i, mem="40Gi" if i == 150 else "80Gi") for i in range(200)])
    r = pub.sync_once()
    assert (r.creates, r.updates, r.deletes) == (0, 2, 0)
    assert r.generations == {(DRIVER, NODE): 1, (DRIVER, "extra"): 0}
    assert pub.sync_once().writes == 0
    # shrinking the pool to one slice: one delete, one update, generation 2
    desired.set(DRIVER, NODE, [gpu(i) for i in range(10)])
    r = pub.sync_once()
    assert (r.creates, r.updates, r.deletes) == (0, 1, 1)
    assert pub.generation(DRIVER, NODE) == 2
    (main,) = [o for o in api.objects.values() if o["spec"]["pool"]["name"] == NODE]
    assert main["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}


def test_deleted_and_edited_slices_are_restored_in_place(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    pub.sync_once()
    name0, name1 = f"{NODE}-{DRIVER}-a0", f"{NODE}-{DRIVER}-a1"
    del api.objects[name1]
    api.edit(name0, lambda o: o["spec"]["devices"][0]["capacity"]["memory"].update(value="1Gi"))
    r = pub.sync_once()
    assert (r.creates, r.updates, r.deletes) == (1, 1, 0)
    assert set(gens(api).values()) == {0}, "restoring is not a content change"
    assert api.objects[name0]["spec"]["devices"][0]["capacity"]["memory"]["value"] == "80Gi"
    assert pub.sync_once().writes == 0


def test_stripped_owner_reference_is_restored(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    pub.sync_once()
    name = f"{NODE}-{DRIVER}-extra-a0"
    api.edit(name, lambda o: o["metadata"].pop("ownerReferences"))
    assert pub.sync_once().updates == 1
    assert api.objects[name]["metadata"]["ownerReferences"][0]["uid"] == "node-uid"


def test_undesired_slices_go_but_other_drivers_and_nodes_stay(
    api: FakeApi, desired: Desired
) -> None:
    pub = make(api, desired)
    pub.sync_once()
    foreign = {
        "metadata": {"name": "other-driver"},
        "spec": {"driver": OTHER, "nodeName": NODE, "pool": {"name": NODE}},
    }
    other_node = {
        "metadata": {"name": "other-node"},
        "spec": {"driver": DRIVER, "nodeName": "node-b", "pool": {"name": "node-b"}},
    }
    stray = {
        "metadata": {"name": "stray"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": "gone"}},
    }
    for o in (foreign, other_node, stray):
        api.create_resource_slice(o)
    del desired.pools[(DRIVER, "extra")]
    r = pub.sync_once()
    assert (r.creates, r.updates, r.deletes) == (0, 0, 2)
    assert {"other-driver", "other-node"} <= api.objects.keys()
    assert "stray" not in api.objects
    assert f"{NODE}-{DRIVER}-extra-a0" not in api.objects


def test_failed_discovery_leaves_slices_alone(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    pub.sync_once()
    desired.fail = RuntimeError("sysfs vanished")
    with pytest.raises(PermanentError, match="discovery failed"):
        pub.sync_once()
    assert len(api.objects) == 3
    assert not pub.synced
    assert pub.last_error is not None
    assert "sysfs vanished" in pub.last_error


def test_invalid_pool_name_fails_that_pool_alone(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    pub.sync_once()
    desired.pools[(DRIVER, "extra")] = PoolSpec(
        driver=DRIVER, node=NODE, pool="Extra_Pool", devices=(gpu(1),)
    )
    with pytest.raises(SliceValidationError, match="pool 'Extra_Pool'"):
        pub.sync_once()
    assert not pub.synced
    assert not any("extra" in name for name in api.objects), "nothing of it is published"
    assert f"{NODE}-{DRIVER}-a1" in api.objects, "the other pool stays"


def test_a_rejected_device_is_left_out_and_the_rest_of_its_pool_published(
    api: FakeApi, desired: Desired
) -> None:
    pub = make(api, desired)
    pub.sync_once()
    bad_taint = gpu(7, taints=(DeviceTaint(key="bad key!", effect="NoSchedule"),))
    desired.set(DRIVER, "extra", [gpu(0), gpu(0), bad_taint, gpu(1)])  # gpu-0 twice
    result = pub.sync_once()  # no exception: the pool is published without the two
    assert pub.synced
    assert (result.updates, result.rejected) == (1, 2)
    [slice_] = [o for o in api.objects.values() if o["spec"]["pool"]["name"] == "extra"]
    assert [d["name"] for d in slice_["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    [reasons] = pub.rejected.values()
    assert "device gpu.example.com/extra/gpu-0: device names must be unique" in reasons[0]
    assert "device gpu.example.com/extra/gpu-7: taint key 'bad key!'" in reasons[1]
    assert pub.rejected_by_driver() == {DRIVER: 2}
    rejections = [m for r, m in api.events if r == "DeviceRejected"]
    assert len(rejections) == 2
    assert "gpu-7" in rejections[1]

    pub.sync_once()  # still rejected: reported once, no new Event, nothing written
    assert len([r for r, _ in api.events if r == "DeviceRejected"]) == 2
    desired.set(DRIVER, "extra", [gpu(0), gpu(1), gpu(7)])  # fixed
    assert pub.sync_once().rejected == 0
    assert pub.rejected == {}
    assert pub.rejected_by_driver() == {DRIVER: 0}


def test_a_rejected_counter_set_takes_its_consumers_with_it(api: FakeApi) -> None:
    sets = (
        CounterSet(name="good", counters={"mem": "80Gi"}),
        CounterSet(name="Bad_Set", counters={"mem": "80Gi"}),
    )
    devices = tuple(
        gpu(i, consumesCounters=[{"counterSet": cs, "counters": {"mem": "10Gi"}}])
        for i, cs in enumerate(["good", "Bad_Set"])
    )
    spec = PoolSpec(driver=DRIVER, node=NODE, pool=NODE, devices=devices, counter_sets=sets)
    pub = ResourceSlicePublisher(api, NODE, lambda: [spec], drivers={DRIVER})
    assert pub.sync_once().rejected == 2
    published = sorted(
        d["name"] for o in api.objects.values() for d in o["spec"].get("devices") or []
    )
    assert published == ["gpu-0"]
    [reasons] = pub.rejected.values()
    assert "counter set 'Bad_Set'" in reasons[0]
    assert "gpu-1: consumesCounters references counter set 'Bad_Set'" in reasons[1]


def test_api_down_then_back(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    api.down = True
    with pytest.raises(RetryableError, match="connection refused"):
        pub.sync_once()
    assert not pub.synced
    assert pub.sync_errors == 1
    api.down = False
    assert pub.sync_once().creates == 3
    assert synced(pub)
    assert pub.last_error is None


def test_conflict_is_reported_and_the_next_round_converges(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    pub.sync_once()
    desired.set(DRIVER, "extra", [gpu(i) for i in range(4)])
    real_update = api.update_resource_slice

    def racing_update(obj: Mapping[str, Any]) -> dict[str, Any]:
        api.edit(obj["metadata"]["name"], lambda o: o["metadata"].setdefault("labels", {}))
        return real_update(obj)

    api.update_resource_slice = racing_update  # type: ignore[method-assign]
    with pytest.raises(ConflictError):
        pub.sync_once()
    api.update_resource_slice = real_update  # type: ignore[method-assign]
    r = pub.sync_once()
    assert r.updates == 1
    assert gens(api)[f"{NODE}-{DRIVER}-extra-a0"] == 1, "one bump, not two"


def test_dropped_fields_are_reported_once_without_a_write_loop(api: FakeApi) -> None:
    api.drop = {"allowMultipleAllocations"}
    d = Desired()
    d.set(DRIVER, NODE, [gpu(0, allowMultipleAllocations=True), gpu(1)])
    pub = make(api, d)
    with pytest.raises(DroppedFieldsError) as err:
        pub.sync_once()
    assert str(err.value) == (
        f"ResourceSlice {NODE}-{DRIVER}-a0: spec.devices[0].allowMultipleAllocations was dropped "
        "by the API server: enable the DRAConsumableCapacity feature gate"
    )
    assert pub.synced, "the slices are published, as far as the server allows"
    assert pub.last_error == str(err.value)
    assert api.events == [("DroppedFields", str(err.value))]
    for _ in range(3):
        assert pub.sync_once().writes == 0
    assert pub.last_error == str(err.value)
    assert len(api.events) == 1


def test_dropped_field_names_are_told_per_driver_until_the_server_keeps_them(
    api: FakeApi,
) -> None:
    api.drop = {"allowMultipleAllocations"}
    d = Desired()
    d.set(DRIVER, NODE, [gpu(0, allowMultipleAllocations=True), gpu(1)])
    pub = make(api, d)
    assert pub.dropped_fields(DRIVER) == frozenset()
    with pytest.raises(DroppedFieldsError):
        pub.sync_once()
    assert pub.dropped_fields(DRIVER) == {"allowMultipleAllocations"}
    assert pub.dropped_fields("other.example.com") == frozenset()
    d.set(DRIVER, NODE, [gpu(0), gpu(1)])  # what a backend publishes once it knows
    pub.sync_once()
    assert pub.dropped_fields(DRIVER) == frozenset()


def test_taint_time_added_is_server_set_and_kept(api: FakeApi) -> None:
    d = Desired()
    d.set(DRIVER, NODE, [gpu(0, taints=(DeviceTaint(key="unhealthy", effect="NoSchedule"),))])
    pub = make(api, d)
    pub.sync_once()
    assert pub.sync_once().writes == 0
    d.set(
        DRIVER,
        NODE,
        [gpu(0, mem="40Gi", taints=(DeviceTaint(key="unhealthy", effect="NoSchedule"),))],
    )
    assert pub.sync_once().updates == 1
    (obj,) = api.objects.values()
    assert obj["spec"]["devices"][0]["taints"][0]["timeAdded"] == "2026-01-01T00:00:00Z"


def test_watches_broken_together_reconnect_spread_out(api: FakeApi, desired: Desired) -> None:
    # A fleet's watches all break when the API server restarts: their reconnects must spread
    # over the whole window (they came back within the last 20 % of it, in step, before).
    fleet = [make(api, desired) for _ in range(200)]
    for failures in (1, 4, 20):
        step = min(WATCH_RETRY_MAX, 0.5 * 2 ** (failures - 1))
        waits = sorted(p.watch_retry_delay(failures) for p in fleet)
        assert all(0.1 * step <= w <= step for w in waits)
        assert waits[len(waits) // 4] < 0.5 * step < waits[3 * len(waits) // 4]
    assert max(p.watch_retry_delay(50) for p in fleet) <= WATCH_RETRY_MAX


def test_run_publishes_and_stops(api: FakeApi, desired: Desired) -> None:
    pub = make(api, desired)
    stop = threading.Event()
    t = threading.Thread(target=pub.run, args=(stop,))
    t.start()
    try:
        for _ in range(100):
            if pub.synced:
                break
            stop.wait(0.05)
        assert pub.synced
        assert len(api.objects) == 3
    finally:
        stop.set()
        t.join(timeout=10)
    assert not t.is_alive()
    assert len(api.objects) == 3, "slices stay for the successor"


# ----------------------------------------------------------------- pure helpers


def test_semantic_equality() -> None:
    want = {"devices": [{"name": "a", "capacity": {"m": {"value": "1Gi"}}}], "sharedCounters": []}
    assert semantically_equal(
        want, {"devices": [{"name": "a", "capacity": {"m": {"value": "1024Mi"}}}]}
    )
    assert not semantically_equal(
        want, {"devices": [{"name": "a", "capacity": {"m": {"value": "1G"}}}]}
    )
    attrs = {"devices": [{"name": "a", "attributes": {"x": {"string": "1k"}}}]}
    assert not semantically_equal(
        attrs, {"devices": [{"name": "a", "attributes": {"x": {"string": "1000"}}}]}
    )
    taint: dict[str, Any] = {
        "devices": [{"name": "a", "taints": [{"key": "k", "effect": "NoSchedule"}]}]
    }
    served = copy.deepcopy(taint)
    served["devices"][0]["taints"][0]["timeAdded"] = "2026-01-01T00:00:00Z"
    assert semantically_equal(taint, served)
    assert not semantically_equal(
        {"devices": [{"name": "a"}]}, {"devices": [{"name": "a", "bindsToNode": True}]}
    )
    assert not semantically_equal(
        {"devices": [{"name": "a", "allowMultipleAllocations": False}]},
        {"devices": [{"name": "a"}]},
    )
    assert semantically_equal({"devices": []}, {})


def test_dropped_fields_and_gates() -> None:
    sent = {
        "devices": [
            {"name": "a", "allowMultipleAllocations": True, "attributes": {"l": {"ints": [1]}}},
            {"name": "b", "taints": [{"key": "k", "effect": "NoSchedule"}]},
        ],
        "perDeviceNodeSelection": True,
    }
    got = {"devices": [{"name": "a", "attributes": {"l": {}}}, {"name": "b"}]}
    paths = dropped_fields(sent, got)
    assert paths == [
        "spec.devices[0].allowMultipleAllocations",
        "spec.devices[0].attributes.l.ints",
        "spec.devices[1].taints",
        "spec.perDeviceNodeSelection",
    ]
    assert [gate_for_path(p) for p in paths] == [
        "DRAConsumableCapacity",
        "DRAListTypeAttributes",
        "DRADeviceTaints",
        "DRAPartitionableDevices",
    ]
    assert (
        gate_for_path("spec.devices[0].capacity.m.requestPolicy.default") == "DRAConsumableCapacity"
    )
    assert gate_for_path("spec.devices[0].name") is None


def test_a_noop_resync_checks_and_renders_nothing_again(
    api: FakeApi, desired: Desired, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rendered pools are reused while discovery returns the same content (equal, not same)."""
    from drakit.publish.render import check_pool as real

    checked: list[str] = []

    def counting(spec: PoolSpec) -> Any:
        checked.append(spec.pool)
        return real(spec)

    monkeypatch.setattr("drakit.publish.publisher.check_pool", counting)
    pub = make(api, desired)
    pub.sync_once()
    assert sorted(checked) == ["extra", NODE]
    desired.set(DRIVER, "extra", [gpu(i) for i in range(3)])  # a new, equal PoolSpec
    assert pub.sync_once().writes == 0
    assert sorted(checked) == ["extra", NODE], "nothing re-checked"
    desired.set(DRIVER, "extra", [gpu(i, mem="40Gi") for i in range(3)])  # a real change
    r = pub.sync_once()
    assert (r.updates, r.generations[(DRIVER, "extra")]) == (1, 1)
    assert sorted(checked) == ["extra", "extra", NODE]
    assert api.objects[f"{NODE}-{DRIVER}-extra-a0"]["spec"]["devices"][0]["capacity"] == {
        "memory": {"value": "40Gi"}
    }


def test_slices_created_after_the_node_is_recreated_get_its_new_uid(
    api: FakeApi, desired: Desired
) -> None:
    pub = make(api, desired)
    pub.sync_once()
    del api.objects[f"{NODE}-{DRIVER}-extra-a0"]
    api.get_node = lambda name, **_: {"metadata": {"name": name, "uid": "new-uid"}}  # type: ignore[method-assign]
    assert pub.sync_once().creates == 1
    refs = api.objects[f"{NODE}-{DRIVER}-extra-a0"]["metadata"]["ownerReferences"]
    assert refs[0]["uid"] == "new-uid"
