"""drakit.nri against a real containerd (v2.4.2, NRI v0.12.3) on the session's real node.

A plugin built on drakit.nri registers on containerd's NRI socket, is configured and synchronized,
sees a pod's RunPodSandbox and CreateContainer, adds an environment variable the container
prints, and after its connection drops reconnects and finds the running container in
Synchronize; an unsolicited UpdateContainers sets the container's cpuset. A handler that raises
fails the container's creation, with its message in the pod's events, and the container starts
once the handler lets it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.realnode import RealNode, delete_pod, env_of, pod, pod_events, pod_phase, run_pod

from drakit.nri import Handlers, Plugin, api

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]


class Recorder(Handlers):
    """Records what the runtime sends for one namespace; adds an env var to its containers."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.lock = threading.Lock()
        self.configured: list[api.ConfigureRequest] = []
        self.synced: list[list[api.Container]] = []
        self.sandboxes: list[api.PodSandbox] = []
        self.created: list[tuple[api.PodSandbox, api.Container]] = []
        self.refuse: set[str] = set()  # pod names whose containers this plugin refuses

    def configure(self, request: api.ConfigureRequest) -> None:
        with self.lock:
            self.configured.append(request)

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        with self.lock:
            self.synced.append(containers)
        return []

    def run_pod_sandbox(self, request: api.RunPodSandboxRequest) -> None:
        if request.pod.namespace == self.namespace:
            with self.lock:
                self.sandboxes.append(request.pod)

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        if request.pod.namespace != self.namespace:
            return api.CreateContainerResponse()
        with self.lock:
            if request.pod.name in self.refuse:
                raise RuntimeError(f"drakit-e2e refuses {request.pod.name}")
            self.created.append((request.pod, request.container))
        env = api.KeyValue(
            key="DRAKIT_NRI_SAW", value=f"{request.pod.name}/{request.container.name}"
        )
        return api.CreateContainerResponse(adjust=api.ContainerAdjustment(env=[env]))


@pytest.fixture
def plugin(real_node: RealNode, namespace: str) -> Iterator[Plugin]:
    recorder = Recorder(namespace)
    plugin = Plugin(recorder, name="drakit-e2e", index="90", socket_path=real_node.nri_socket)
    runner = threading.Thread(target=plugin.run, kwargs={"backoff": 0.2}, daemon=True)
    runner.start()
    try:
        yield plugin
    finally:
        plugin.stop()
        runner.join(timeout=10)
        assert not runner.is_alive(), "Plugin.run did not return after stop()"


def test_plugin_registers_sees_a_pod_and_adjusts_its_container(
    control_plane: ControlPlane, real_node: RealNode, namespace: str, plugin: Plugin
) -> None:
    recorder = plugin.handlers
    assert isinstance(recorder, Recorder)
    assert plugin.synchronized.wait(15), "containerd never synchronized the plugin"
    configure = recorder.configured[0]
    assert configure.runtime_name == "containerd"
    assert configure.runtime_version.startswith("2.4.2")
    assert configure.NRI_version == "v0.12.3"  # what hack/gen-protos.py pins api.proto to
    assert (configure.registration_timeout, configure.request_timeout) == (5000, 2000)
    # Subscribed to exactly the two events overridden: RunPodSandbox (1) and CreateContainer (4).
    assert plugin.events == 0x1 | 0x8

    log = run_pod(control_plane, real_node, namespace, "nri", "env", {})
    assert env_of(log).get("DRAKIT_NRI_SAW") == "nri/c"
    with recorder.lock:
        assert [p.name for p in recorder.sandboxes] == ["nri"]
        ((pod, container),) = recorder.created
    assert pod.uid == recorder.sandboxes[0].uid
    assert pod.namespace == namespace
    assert container.name == "c"
    assert any(ns.type == "network" and ns.path for ns in pod.linux.namespaces)

    # An unsolicited update reaches the container's cgroup (cgroup v1 cpuset, cgroupfs driver).
    cpuset = (
        Path("/sys/fs/cgroup/cpuset") / container.linux.cgroups_path.lstrip("/") / "cpuset.cpus"
    )
    assert cpuset.is_file(), f"no cpuset cgroup at {cpuset}"
    assert cpuset.read_text().strip() != "0", "the container already runs on CPU 0 only"
    update = api.ContainerUpdate(container_id=container.id)
    update.linux.resources.cpu.cpus = "0"
    assert plugin.update_containers([update]) == []
    assert cpuset.read_text().strip() == "0"

    # The connection drops: Plugin.run reconnects, and Synchronize lists the running container
    # (with the env var this plugin added when it was created).
    plugin.close()
    wait_for(lambda: len(recorder.synced) >= 2, timeout=15, what="the plugin to re-synchronize")
    with recorder.lock:
        resynced = [c for c in recorder.synced[-1] if c.id == container.id]
    assert resynced, "the running container is missing from the second Synchronize"
    assert "DRAKIT_NRI_SAW=nri/c" in resynced[0].env
    delete_pod(control_plane, namespace, "nri")


def test_a_handler_error_fails_the_container_until_it_stops(
    control_plane: ControlPlane, real_node: RealNode, namespace: str, plugin: Plugin
) -> None:
    recorder = plugin.handlers
    assert isinstance(recorder, Recorder)
    assert plugin.synchronized.wait(15), "containerd never synchronized the plugin"
    recorder.refuse.add("refused")
    body = pod("refused", real_node.name, ["sh", "-c", "echo started; exec sleep 3600"])
    control_plane.api("POST", f"/api/v1/namespaces/{namespace}/pods", body)

    def refusal() -> list[str] | None:
        found = [e for e in pod_events(control_plane, namespace, "refused") if "refuses" in e]
        return found or None

    events = wait_for(refusal, timeout=60, what="the kubelet to report the plugin's refusal")
    assert "drakit-e2e refuses refused" in events[0]
    assert pod_phase(control_plane, namespace, "refused") == "Pending"
    with recorder.lock:
        assert recorder.created == []
    assert plugin.connected, "an error answer must not cost the plugin its connection"

    recorder.refuse.clear()  # the kubelet retries CreateContainer with back-off
    wait_for(
        lambda: pod_phase(control_plane, namespace, "refused") == "Running",
        timeout=90,
        what="the container to start once the plugin lets it",
    )
    delete_pod(control_plane, namespace, "refused")
