"""drakit's NRI plugin inside ``drakit node``: the enforcement hooks called at the runtime's events.

At CreateContainer the container's CDI devices name the claims' devices it uses; every backend
plugin implementing ``drakit_container_resources`` is asked, the answers are merged into one
cpuset, and the adjustment also removes the fail-closed guard mounts of drakit's CDI specs. At
Synchronize (after drakit or the runtime restarts) every existing container is set right, and
whenever a prepare or unprepare changes what is held, every known container is asked about again
and updated where its answer changed. See docs/nri.md.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from drakit.cpuset import format_cpulist
from drakit.enforce.index import DeviceIndex
from drakit.enforce.merge import (
    Wanted,
    adjustment,
    guard_mounts,
    merge_answers,
    needs_update,
    update,
)
from drakit.enforce.state import NriState
from drakit.enforce.views import container_view, sandbox_view
from drakit.errors import DrakitError
from drakit.host.pluginhost import PluginHost
from drakit.models import (
    ContainerResources,
    ContainerView,
    PodRef,
    PodSandboxView,
    PreparedDevice,
)
from drakit.nri import Handlers, NRIError, Plugin, api
from drakit.statefiles import open_private

__all__ = ["Enforcer", "NriState"]

log = logging.getLogger(__name__)

HOOK = "drakit_container_resources"
START, STOP = "drakit_pod_sandbox_start", "drakit_pod_sandbox_stop"
NetworkDataSink = Callable[[str, str, str, Sequence[PreparedDevice]], None]
_LIVE = frozenset({api.CONTAINER_CREATED, api.CONTAINER_RUNNING, api.CONTAINER_PAUSED})


@dataclass
class _Known:
    view: ContainerView
    wanted: Wanted


class Enforcer(Handlers):
    """The NRI event handlers that call drakit's enforcement hooks.

    Args:
        host: the plugin host (the hooks).
        index: returns what every driver holds now (read from the checkpoints).
        memory_nodes: apply the plugins' memory nodes (``cpuset.mems``) too.
        network_data: records what ``drakit_pod_sandbox_start`` returned
            (``driver, claim uid, plugin, devices``) and writes it to the claim.
        lock_path: a file locked while connected, so that of two instances on a node (a
            rolling update) only one is registered: the runtime fails every container two
            plugins set the cpuset of (``plugins "50-drakit" and "50-drakit" both tried to set
            CPUSetCPUs``). The other waits in :attr:`NriState.STANDBY`.
    """

    def __init__(
        self,
        host: PluginHost,
        index: Callable[[], DeviceIndex],
        *,
        memory_nodes: bool,
        network_data: NetworkDataSink | None = None,
        lock_path: Path | None = None,
    ) -> None:
        self.host = host
        self.network_data = network_data
        self.lock_path = lock_path
        self._standby = False  # another instance holds the lock
        # With a lock, a state read before the runner thread's first try is "connecting": not
        # "absent" (which reads as "this instance holds NRI and the runtime has none"), nor
        # "standby" (which fail_closed lets pass, as another instance serves NRI).
        self._lock_pending = lock_path is not None
        self.index = index
        self.memory_nodes = memory_nodes
        self.plugin: Plugin | None = None
        self._lock = threading.Lock()
        self._known: dict[str, _Known] = {}
        self._pods: dict[str, api.PodSandbox] = {}
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runner: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, plugin: Plugin) -> None:
        """Run ``plugin`` (reconnecting with back-off) and the reconciler, each on a thread."""
        self.plugin = plugin
        self._runner = threading.Thread(target=self._run, args=(plugin,), name="nri", daemon=True)
        self._runner.start()
        self._thread = threading.Thread(target=self._reconcile_loop, name="nri-sync", daemon=True)
        self._thread.start()

    def _run(self, plugin: Plugin) -> None:
        """``plugin.run()`` while holding the node's NRI lock (waiting for it in standby)."""
        if self.lock_path is None:
            plugin.run()
            return
        try:
            fd = open_private(self.lock_path)
        except DrakitError as e:
            log.error("NRI: cannot open the lock %s, NRI stays off: %s", self.lock_path, e)
            self._lock_pending = False  # NRI stays off: fail_closed keeps the node unready
            return
        try:
            logged = False
            while not self._stop.is_set():
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    self._standby, self._lock_pending = True, False
                    if not logged:
                        log.info("NRI: another drakit instance holds %s; waiting", self.lock_path)
                        logged = True
                    self._stop.wait(0.5)
            self._standby = self._lock_pending = False
            if not self._stop.is_set():
                plugin.run()
        finally:
            os.close(fd)  # releases the lock

    def stop(self) -> None:
        """Disconnect and stop the threads."""
        self._stop.set()
        self._dirty.set()
        if self.plugin is not None:
            self.plugin.stop()
        if self._runner is not None:
            self._runner.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def state(self) -> NriState:
        """Where the connection to the runtime stands."""
        plugin = self.plugin
        if plugin is None:
            return NriState.DISABLED
        if self._standby:
            return NriState.STANDBY
        if self._lock_pending:
            return NriState.CONNECTING
        if plugin.connected and plugin.synchronized.is_set():
            return NriState.CONNECTED
        if not plugin.socket_path.exists():
            return NriState.ABSENT
        return NriState.CONNECTING

    def held_changed(self) -> None:
        """A prepare or unprepare changed what is held: reconcile every known container."""
        self._dirty.set()

    # -- the hooks -------------------------------------------------------------------------------

    def wanted(self, view: ContainerView, index: DeviceIndex) -> Wanted:
        """Every plugin's answer for one container, merged.

        Raises:
            DrakitError: a plugin failed, or two plugins disagree.
        """
        answers: dict[str, ContainerResources | None] = {}
        for driver, plugins in index.plugins.items():
            for plugin in plugins:
                if HOOK not in self.host.hook_implementations(plugin):
                    continue
                devices = index.devices(driver, plugin, view.cdi_devices)
                held = index.held.get((driver, plugin), ())
                answers[plugin] = self.host.container_resources(plugin, view, devices, held)
        return merge_answers(answers, memory_nodes=self.memory_nodes)

    # -- NRI events ------------------------------------------------------------------------------

    def configure(self, request: api.ConfigureRequest) -> None:
        """Log which runtime connected."""
        log.info(
            "NRI: configured by %s %s (NRI %s)",
            request.runtime_name,
            request.runtime_version,
            request.NRI_version,
        )

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        """Set every existing pod and container right (those created while drakit was away too).

        Sandboxes that are gone get ``drakit_pod_sandbox_stop`` for their claims; every existing
        sandbox with claims gets ``drakit_pod_sandbox_start`` (idempotent): NRI calls no plugin
        for a sandbox started while the plugin was away, nor again for one whose call a crash
        cut short. An error there is logged; the pod keeps running.
        """
        index = self.index()
        updates: list[api.ContainerUpdate] = []
        alive = {p.uid for p in pods}
        for uid in sorted(index.pods.keys() - alive):  # sandboxes gone while drakit was away
            gone = PodSandboxView(id="", pod=PodRef(uid=uid, namespace="", name=""))
            self._stop_sandbox(gone)
        for pod in pods:  # sandboxes started while drakit was away, or cut short by a crash
            if pod.uid in index.pods:
                sandbox = sandbox_view(pod)
                try:
                    self._start_sandbox(index, sandbox)
                except DrakitError as e:
                    log.error("NRI: pod %s: claim not set up at synchronize: %s", _pod(sandbox), e)
        with self._lock:
            self._pods = {p.id: p for p in pods}
            self._known = {}
            for ctr in containers:
                if ctr.state not in _LIVE:
                    continue
                view = container_view(self._pods.get(ctr.pod_sandbox_id), ctr)
                try:
                    wanted = self.wanted(view, index)
                except DrakitError as e:
                    log.error("NRI: container %s left as it is: %s", _name(view), e)
                    continue
                self._known[ctr.id] = _Known(view, wanted)
                if wanted and needs_update(ctr, wanted):
                    log.info("NRI: correcting container %s: %s", _name(view), _show(wanted))
                    updates.append(update(ctr.id, wanted))
        return updates

    def run_pod_sandbox(self, request: api.RunPodSandboxRequest) -> None:
        """Remember the pod; ``drakit_pod_sandbox_start`` for each claim (an error fails it)."""
        with self._lock:
            self._pods[request.pod.id] = request.pod
        self._start_sandbox(self.index(), sandbox_view(request.pod))

    def _start_sandbox(self, index: DeviceIndex, sandbox: PodSandboxView) -> None:
        """``drakit_pod_sandbox_start`` for each claim of the pod; the first error is raised."""
        for driver, claim_uid, plugin, devices in self._sandbox_calls(index, sandbox, START):
            got = self.host.pod_sandbox_start(plugin, sandbox, claim_uid, devices)
            log.info("NRI: pod %s: %s set up claim %s", _pod(sandbox), plugin, claim_uid)
            if got is not None and self.network_data is not None:
                self.network_data(driver, claim_uid, plugin, got)

    def stop_pod_sandbox(self, request: api.StopPodSandboxRequest) -> None:
        """``drakit_pod_sandbox_stop`` for each claim of the pod (errors are logged)."""
        self._stop_sandbox(sandbox_view(request.pod))

    def remove_pod_sandbox(self, request: api.RemovePodSandboxRequest) -> None:
        """``drakit_pod_sandbox_stop`` again (idempotent), then forget the pod."""
        self._stop_sandbox(sandbox_view(request.pod))
        with self._lock:
            self._pods.pop(request.pod.id, None)

    def _sandbox_calls(
        self, index: DeviceIndex, sandbox: PodSandboxView, hook: str
    ) -> list[tuple[str, str, str, Sequence[PreparedDevice]]]:
        """``(driver, claim uid, plugin, devices)`` per plugin of the pod's claims with ``hook``."""
        out = []
        for driver, claim_uid in index.pods.get(sandbox.pod.uid, ()):
            for plugin, devices in index.claim_devices.get((driver, claim_uid), {}).items():
                if devices and hook in self.host.hook_implementations(plugin):
                    out.append((driver, claim_uid, plugin, devices))
        return out

    def _stop_sandbox(self, sandbox: PodSandboxView) -> None:
        for _, claim_uid, plugin, devices in self._sandbox_calls(self.index(), sandbox, STOP):
            try:
                self.host.pod_sandbox_stop(plugin, sandbox, claim_uid, devices)
            except DrakitError as e:
                log.error(
                    "NRI: pod %s: %s could not undo claim %s: %s",
                    _pod(sandbox),
                    plugin,
                    claim_uid,
                    e,
                )

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        """The merged cpuset, and the fail-closed guard mounts removed."""
        view = container_view(request.pod, request.container)
        log.debug(
            "NRI: CreateContainer %s: CDI_devices [%s], CDI annotations %s",
            _name(view),
            ", ".join(d.name for d in request.container.CDI_devices),
            sorted(k for k in request.container.annotations if k.startswith("cdi.k8s.io/")),
        )
        wanted = self.wanted(view, self.index())  # an error fails the creation, with its message
        guards = guard_mounts(request.container.mounts)
        with self._lock:
            self._pods[request.pod.id] = request.pod
            self._known[view.id] = _Known(view, wanted)
        if wanted or guards:
            log.info(
                "NRI: container %s (CDI %s): %s",
                _name(view),
                ", ".join(view.cdi_devices) or "none",
                _show(wanted),
            )
        return api.CreateContainerResponse(adjust=adjustment(wanted, guards))

    def remove_container(self, request: api.RemoveContainerRequest) -> None:
        """Forget the container."""
        with self._lock:
            self._known.pop(request.container.id, None)

    # -- reconciling -----------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Ask again about every known container; update those whose answer changed.

        Returns:
            The IDs of the containers updated.
        """
        plugin = self.plugin
        if plugin is None or not plugin.connected:
            return []
        index = self.index()
        with self._lock:
            known = dict(self._known)
        changed: dict[str, Wanted] = {}
        for cid, k in known.items():
            try:
                wanted = self.wanted(k.view, index)
            except DrakitError as e:
                log.error("NRI: container %s keeps its cpuset: %s", _name(k.view), e)
                continue
            if wanted and wanted != k.wanted:
                changed[cid] = wanted
        if not changed:
            return []
        try:
            failed = plugin.update_containers([update(c, w) for c, w in changed.items()])
        except NRIError as e:
            log.warning("NRI: updating %d containers failed (retried later): %s", len(changed), e)
            self._dirty.set()
            return []
        bad = {f.container_id for f in failed}
        with self._lock:
            for cid, wanted in changed.items():
                if cid in self._known and cid not in bad:
                    self._known[cid] = _Known(self._known[cid].view, wanted)
        for cid in sorted(changed.keys() - bad):
            log.info("NRI: updated container %s: %s", _name(known[cid].view), _show(changed[cid]))
        return sorted(changed.keys() - bad)

    def _reconcile_loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            plugin = self.plugin
            if plugin is not None and plugin.synchronized.is_set():
                try:
                    self.reconcile()
                except DrakitError:
                    log.exception("NRI: reconciling containers failed")
            self._stop.wait(0.05)  # prepares come in bursts: one pass for a burst


def _pod(sandbox: PodSandboxView) -> str:
    pod = sandbox.pod
    return f"{pod.namespace}/{pod.name}" if pod.name else f"uid {pod.uid}"


def _name(view: ContainerView) -> str:
    pod = f"{view.pod.namespace}/{view.pod.name}" if view.pod.name else view.sandbox_id[:12]
    return f"{pod}/{view.name}"


def _show(wanted: Wanted) -> str:
    parts: Sequence[str] = [
        *([f"cpus {format_cpulist(wanted.cpus)}"] if wanted.cpus is not None else []),
        *([f"mems {format_cpulist(wanted.mems)}"] if wanted.mems is not None else []),
    ]
    return ", ".join(parts) or "no change"
