"""drakit.enforce: containers mapped to claims' devices, plugins' answers merged into NRI messages.

The CPU backend runs for real on a simulated node (``minimal-1s``); the requests are built the
way containerd 2.4.2 sends them (CDI device names in ``Container.CDI_devices``, the CDI spec's
mounts among the container's mounts).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from drakit.cpuset import format_cpulist, parse_cpulist
from drakit.enforce.enforcer import Enforcer
from drakit.enforce.guard import GUARD_DIR, guard_mount
from drakit.enforce.index import DeviceIndex, Holding
from drakit.enforce.merge import (
    Wanted,
    adjustment,
    guard_mounts,
    merge_answers,
    needs_update,
    update,
)
from drakit.enforce.state import NriState
from drakit.enforce.views import cdi_names, container_view, sandbox_view
from drakit.errors import PermanentError
from drakit.hookspecs import hookimpl
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import ContainerResources, NetworkData, PodSandboxView, PreparedDevice
from drakit.nri import Plugin, api
from drakit.prepare.claims import reserved_pods

DRIVER = "cpu.drakit.io"
KIND = f"k8s.{DRIVER}/claim"


@pytest.fixture(scope="module")
def host() -> Iterator[PluginHost]:
    with open_host(DrakitSettings(profile="minimal-1s", plugins={"cpu": {}})) as h:
        h.discover()
        yield h


def _online(host: PluginHost) -> frozenset[int]:
    """The simulated node's CPUs, as its sysfs says (the CPU backend reads the same tree)."""
    online = Path(host.node.sysfs_root) / "sys/devices/system/cpu/online"
    return parse_cpulist(online.read_text().strip())


def _prepared(cpus: str, device: str = "numa-0") -> PreparedDevice:
    return PreparedDevice(
        request="r", pool="node", device=device, state={"cpus": cpus, "policy": "packed"}
    )


def _index(claims: dict[str, PreparedDevice]) -> DeviceIndex:
    """``claim uid -> device`` as Node.device_index builds it from the checkpoint."""
    by_cdi = {
        f"{KIND}={uid}-{d.device}": Holding(DRIVER, "cpu", uid, d) for uid, d in claims.items()
    }
    return DeviceIndex(
        by_cdi=by_cdi, held={(DRIVER, "cpu"): list(claims.values())}, plugins={DRIVER: ["cpu"]}
    )


def _pod(name: str = "p") -> api.PodSandbox:
    pod = api.PodSandbox(id=f"sb-{name}", uid=f"uid-{name}", name=name, namespace="ns")
    pod.linux.namespaces.append(api.LinuxNamespace(type="network", path="/var/run/netns/cni-1"))
    pod.ips.append("10.88.0.5")
    return pod


def _container(cid: str, cdi: list[str], *, guarded: bool = False, cpus: str = "") -> api.Container:
    ctr = api.Container(id=cid, pod_sandbox_id="sb-p", name="c", state=api.CONTAINER_RUNNING)
    for name in cdi:
        ctr.CDI_devices.append(api.CDIDevice(name=name))
        if guarded:
            ctr.mounts.append(
                api.Mount(
                    destination=f"{GUARD_DIR}/{name.split('=', 1)[1]}",
                    source=f"/var/lib/drakit/{DRIVER}/x",
                    type="bind",
                    options=["ro", "nosuid", "nodev", "bind"],
                )
            )
    ctr.mounts.append(api.Mount(destination="/etc/hosts", source="/x/hosts", type="bind"))
    ctr.linux.resources.cpu.cpus = cpus
    return ctr


# -- views ---------------------------------------------------------------------------------------


def test_cdi_names_come_from_the_devices_and_the_cdi_annotations_once_each() -> None:
    ctr = api.Container(id="c1")
    ctr.CDI_devices.append(api.CDIDevice(name=f"{KIND}=u1-numa-0"))
    ctr.annotations["cdi.k8s.io/dra"] = f"{KIND}=u1-numa-0, {KIND}=u2-numa-1"
    ctr.annotations["other"] = f"{KIND}=u3-numa-0"
    assert cdi_names(ctr) == (f"{KIND}=u1-numa-0", f"{KIND}=u2-numa-1")


def test_views_carry_the_pod_and_its_network_namespace() -> None:
    pod = _pod()
    view = container_view(pod, _container("c1", [f"{KIND}=u1-numa-0"]))
    assert (view.pod.uid, view.pod.namespace, view.pod.name) == ("uid-p", "ns", "p")
    assert view.cdi_devices == (f"{KIND}=u1-numa-0",)
    sandbox = sandbox_view(pod)
    assert (sandbox.netns, sandbox.ips) == ("/var/run/netns/cni-1", ("10.88.0.5",))
    host_net = api.PodSandbox(id="sb", uid="u", name="h", namespace="ns")
    assert sandbox_view(host_net).netns is None


def test_the_index_gives_each_plugin_only_its_own_devices() -> None:
    d = _prepared("2-3")
    index = _index({"u1": d})
    names = [f"{KIND}=u1-numa-0", "nvidia.com/gpu=gpu0", f"{KIND}=u9-numa-0"]
    assert index.devices(DRIVER, "cpu", names) == [d]
    assert index.devices(DRIVER, "other", names) == []
    assert index.devices("gpu.drakit.io", "cpu", names) == []
    assert index.claims(names) == {"u1"}


# -- merging -------------------------------------------------------------------------------------


def test_answers_merge_and_memory_nodes_only_when_configured() -> None:
    a = ContainerResources(cpus=frozenset({2, 3}), mems=frozenset({0}))
    assert merge_answers({"cpu": a, "gpu": None}, memory_nodes=False) == Wanted(
        cpus=frozenset({2, 3})
    )
    assert merge_answers({"cpu": a}, memory_nodes=True) == Wanted(
        cpus=frozenset({2, 3}), mems=frozenset({0})
    )
    assert not merge_answers({"cpu": None}, memory_nodes=True)


def test_two_plugins_wanting_different_cpus_is_an_error_naming_both() -> None:
    a = ContainerResources(cpus=frozenset({2, 3}))
    b = ContainerResources(cpus=frozenset({4}))
    with pytest.raises(PermanentError, match=r"'a' and 'b' want different CPUs .*2-3 and 4"):
        merge_answers({"a": a, "b": b}, memory_nodes=False)
    with pytest.raises(PermanentError, match="empty set of CPUs"):
        merge_answers({"a": ContainerResources(cpus=frozenset())}, memory_nodes=False)


def test_adjustments_and_updates_carry_the_cpuset_and_remove_the_guards() -> None:
    wanted = Wanted(cpus=frozenset({1, 2, 3, 7}), mems=frozenset({0}))
    adjust = adjustment(wanted, [f"{GUARD_DIR}/u1-numa-0"])
    assert adjust.linux.resources.cpu.cpus == "1-3,7"
    assert adjust.linux.resources.cpu.mems == "0"
    assert [m.destination for m in adjust.mounts] == [f"-{GUARD_DIR}/u1-numa-0"]
    up = update("c1", wanted)
    assert (up.container_id, up.linux.resources.cpu.cpus) == ("c1", "1-3,7")
    assert not adjustment(Wanted()).HasField("linux")


def test_needs_update_compares_the_sets_not_the_spelling() -> None:
    ctr = _container("c1", [], cpus="3,1-2,7")
    assert not needs_update(ctr, Wanted(cpus=frozenset({1, 2, 3, 7})))
    assert needs_update(ctr, Wanted(cpus=frozenset({1, 2})))
    assert needs_update(_container("c2", [], cpus=""), Wanted(cpus=frozenset({0})))


def test_the_guard_mount_is_per_device_and_its_source_is_in_the_drivers_state_dir(
    tmp_path: Path,
) -> None:
    m = guard_mount(tmp_path, DRIVER, "u1-numa-0")
    assert m.container_path == f"{GUARD_DIR}/u1-numa-0"
    assert Path(m.host_path).parent == tmp_path / DRIVER
    assert not Path(m.host_path).exists()
    ctr = _container("c1", [f"{KIND}=u1-numa-0"], guarded=True)
    assert guard_mounts(ctr.mounts) == [f"{GUARD_DIR}/u1-numa-0"]


# -- the enforcer, with the CPU backend ----------------------------------------------------------


def test_a_container_with_a_cpu_claim_gets_its_cpus_and_its_guard_removed(
    host: PluginHost,
) -> None:
    index = _index({"u1": _prepared("2-3")})
    enforcer = Enforcer(host, lambda: index, memory_nodes=True)
    request = api.CreateContainerRequest(
        pod=_pod(), container=_container("c1", [f"{KIND}=u1-numa-0"], guarded=True)
    )
    adjust = enforcer.create_container(request).adjust
    assert parse_cpulist(adjust.linux.resources.cpu.cpus) == {2, 3}
    assert adjust.linux.resources.cpu.mems == "0"
    assert [m.destination for m in adjust.mounts] == [f"-{GUARD_DIR}/u1-numa-0"]


def test_a_container_without_one_is_kept_on_the_shared_pool(host: PluginHost) -> None:
    index = _index({"u1": _prepared("2-3"), "u2": _prepared("5", device="numa-0-b")})
    enforcer = Enforcer(host, lambda: index, memory_nodes=False)
    request = api.CreateContainerRequest(pod=_pod(), container=_container("c2", []))
    adjust = enforcer.create_container(request).adjust
    shared = parse_cpulist(adjust.linux.resources.cpu.cpus)
    assert shared == _online(host) - {2, 3, 5}
    assert not adjust.linux.resources.cpu.mems
    assert list(adjust.mounts) == []


def test_synchronize_corrects_only_the_containers_that_are_wrong(host: PluginHost) -> None:
    index = _index({"u1": _prepared("2-3")})
    enforcer = Enforcer(host, lambda: index, memory_nodes=False)
    pool = _online(host) - {2, 3}

    right = _container("right", [f"{KIND}=u1-numa-0"], cpus="2-3")
    wrong = _container("wrong", [f"{KIND}=u1-numa-0"], cpus=format_cpulist(_online(host)))
    shared_wrong = _container("shared", [], cpus="2")
    shared_right = _container("ok", [], cpus=format_cpulist(pool))
    stopped = _container("stopped", [], cpus="2")
    stopped.state = api.CONTAINER_STOPPED
    updates = enforcer.synchronize([_pod()], [right, wrong, shared_wrong, shared_right, stopped])
    got = {u.container_id: parse_cpulist(u.linux.resources.cpu.cpus) for u in updates}
    assert got == {"wrong": {2, 3}, "shared": pool}


def test_reconcile_needs_a_connection_and_a_claim_error_fails_the_creation(
    host: PluginHost,
) -> None:
    a = _prepared("2-3")
    index = DeviceIndex(
        by_cdi={f"{KIND}=u1-numa-0": Holding(DRIVER, "cpu", "u1", a)},
        held={(DRIVER, "cpu"): [a]},
        plugins={DRIVER: ["cpu"]},
    )
    enforcer = Enforcer(host, lambda: index, memory_nodes=False)
    assert enforcer.reconcile() == []  # no plugin attached: nothing to send
    assert enforcer.state().value == "disabled"
    empty = _prepared("")  # a claim rebuilt from its CDI spec: its CPUs are unknown
    enforcer2 = Enforcer(host, lambda: _index({"u1": empty}), memory_nodes=False)
    request = api.CreateContainerRequest(
        pod=_pod(), container=_container("c1", [f"{KIND}=u1-numa-0"])
    )
    assert not enforcer2.create_container(request).adjust.HasField("linux")


# -- pod sandbox hooks ---------------------------------------------------------------------------


class NetnsPlugin:
    """A backend moving something into the pod's network namespace (records what it was asked)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None, tuple[str, ...]]] = []
        self.refuse = False

    @hookimpl
    def drakit_pod_sandbox_start(
        self, sandbox: PodSandboxView, claim_uid: str, devices: Sequence[PreparedDevice]
    ) -> list[PreparedDevice]:
        if self.refuse:
            raise PermanentError("the VF is gone")
        self.calls.append(("start", claim_uid, sandbox.netns, tuple(d.device for d in devices)))
        data = NetworkData(interface_name="net1")
        return [d.model_copy(update={"network_data": data}) for d in devices]

    @hookimpl
    def drakit_pod_sandbox_stop(
        self, sandbox: PodSandboxView, claim_uid: str, devices: Sequence[PreparedDevice]
    ) -> bool:
        self.calls.append(("stop", claim_uid, sandbox.netns, tuple(d.device for d in devices)))
        return True


def test_sandbox_hooks_get_the_pods_claims_and_their_network_data_is_recorded() -> None:
    plugin = NetnsPlugin()
    with open_host(DrakitSettings(profile="minimal-1s", plugins={"cpu": {}})) as host:
        host.registry.register("netns-test", plugin)
        vf = PreparedDevice(request="nic", pool="node", device="vf-3")
        index = DeviceIndex(
            plugins={"nic.drakit.io": ["netns-test"]},
            pods={"uid-p": [("nic.drakit.io", "claim-1")]},
            claim_devices={("nic.drakit.io", "claim-1"): {"netns-test": [vf]}},
        )
        recorded: list[tuple[str, str, str, list[str | None]]] = []
        enforcer = Enforcer(
            host,
            lambda: index,
            memory_nodes=False,
            network_data=lambda drv, uid, plg, devs: recorded.append(
                (
                    drv,
                    uid,
                    plg,
                    [d.network_data.interface_name if d.network_data else None for d in devs],
                )
            ),
        )
        enforcer.run_pod_sandbox(api.RunPodSandboxRequest(pod=_pod()))
        other = api.PodSandbox(id="sb-o", uid="uid-o", name="o", namespace="ns")
        enforcer.run_pod_sandbox(api.RunPodSandboxRequest(pod=other))  # no claims: no call
        assert plugin.calls == [("start", "claim-1", "/var/run/netns/cni-1", ("vf-3",))]
        assert recorded == [("nic.drakit.io", "claim-1", "netns-test", ["net1"])]

        enforcer.stop_pod_sandbox(api.StopPodSandboxRequest(pod=_pod()))
        # the sandbox vanished while drakit was away: Synchronize undoes the claim's setup
        enforcer.synchronize([other], [])
        assert plugin.calls[1:] == [
            ("stop", "claim-1", "/var/run/netns/cni-1", ("vf-3",)),
            ("stop", "claim-1", None, ("vf-3",)),
        ]

        # the sandbox started while drakit was away (no RunPodSandbox came): Synchronize sets
        # the claim up, and records its networkData
        del plugin.calls[:]
        enforcer.synchronize([_pod(), other], [])
        assert plugin.calls == [("start", "claim-1", "/var/run/netns/cni-1", ("vf-3",))]
        assert recorded[-1] == ("nic.drakit.io", "claim-1", "netns-test", ["net1"])

        plugin.refuse = True  # an error fails the sandbox's creation, with its message
        with pytest.raises(PermanentError, match="the VF is gone"):
            enforcer.run_pod_sandbox(api.RunPodSandboxRequest(pod=_pod()))
        enforcer.synchronize([_pod()], [])  # at Synchronize it is logged; the rest goes on


def test_reserved_pods_are_the_pod_uids_of_status_reserved_for() -> None:
    claim = {
        "status": {
            "reservedFor": [
                {"resource": "pods", "name": "b", "uid": "u2"},
                {"resource": "pods", "name": "a", "uid": "u1"},
                {"apiGroup": "x.io", "resource": "jobs", "name": "j", "uid": "u3"},
            ]
        }
    }
    assert reserved_pods(claim) == ("u1", "u2")
    assert reserved_pods({}) == ()


def test_of_two_instances_on_a_node_only_the_lock_holder_connects(
    host: PluginHost, tmp_path: Path
) -> None:
    """A rolling update runs two drakit nodes at once: the runtime would fail every container
    both set the cpuset of, so the second waits in standby until the first stops."""
    lock = tmp_path / "nri.lock"
    socket = tmp_path / "nri.sock"  # absent: the holder keeps trying to connect

    def enforcer() -> Enforcer:
        e = Enforcer(host, DeviceIndex, memory_nodes=False, lock_path=lock)
        handlers_plugin = Plugin(e, name="drakit", index="50", socket_path=socket)
        e.start(handlers_plugin)
        return e

    first = enforcer()
    wait = time.monotonic() + 10
    while first.state() != NriState.ABSENT and time.monotonic() < wait:
        time.sleep(0.05)
    assert first.state() == NriState.ABSENT
    second = enforcer()
    try:
        while second.state() != NriState.STANDBY and time.monotonic() < wait:
            time.sleep(0.05)
        assert second.state() == NriState.STANDBY
        first.stop()
        while second.state() != NriState.ABSENT and time.monotonic() < wait + 10:
            time.sleep(0.05)
        assert second.state() == NriState.ABSENT, "the lock did not pass to the second"
    finally:
        first.stop()
        second.stop()
