"""``drakit node``: the DaemonSet entrypoint that runs everything for every enabled backend.

Start-up: load plugins (simulated hardware if a profile is set), discover, then per DRA driver
open the checkpoint, start the prepare pipeline and the kubelet sockets; publish
ResourceSlices (when a cluster is configured), poll device health, serve metrics and probes.
An unreachable API server does not stop the start: the kubelet is served (unprepare works from
the checkpoint, prepare answers "cannot read the claim, will retry"), the publisher retries with
backoff and publishes as soon as the server is back, and ``/readyz`` answers 503 with the
publisher's last error (which names the unreachable server) until then.

SIGTERM: stop accepting kubelet calls, let those in flight finish, remove the sockets, and
leave the ResourceSlices for the successor (a rolling update adopts them).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack, suppress
from types import FrameType
from typing import TYPE_CHECKING, Any

from drakit.context import SkippedItem
from drakit.enforce.guard import guard_mount
from drakit.enforce.index import DeviceIndex, Holding
from drakit.enforce.state import NriState
from drakit.errors import DrakitError, PermanentError, RetryableError
from drakit.host.inventory import Inventory, InventorySnapshot
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.kubelet import HealthBroadcaster, KubeletPluginServer, grpc_initialised
from drakit.models import Device, DeviceHealth, DeviceKey, PreparedDevice
from drakit.node.health import (
    UNHEALTHY_TAINT,
    Unhealthy,
    assess_health,
    default_health,
    with_health_taints,
)
from drakit.node.labels import PREFIX as LABEL_PREFIX
from drakit.node.labels import LabelKeeper, keep_failed
from drakit.node.labels import merge as merge_labels
from drakit.node.metrics import Metrics, ProbeServer
from drakit.prepare.checkpoint import ClaimPhase, read_boot_id
from drakit.prepare.pipeline import ClaimSource, DriverState
from drakit.publish.publisher import ResourceSlicePublisher
from drakit.publish.render import PoolSpec

if TYPE_CHECKING:
    from drakit.enforce.enforcer import Enforcer  # NRI loads only with nri.enabled
    from drakit.kube import KubeClient  # the Kubernetes client loads only where a node has one

__all__ = ["UNHEALTHY_TAINT", "Node"]

log = logging.getLogger(__name__)

_NODE_AT_START_TIMEOUT = (2.0, 5.0)
"""Seconds to connect and to wait for the Node read at start-up (before the kubelet is served)."""


def _return_free_heap() -> None:
    """Give the C heap's free pages back to the kernel (glibc's ``malloc_trim``).

    Start-up (imports, plugin loading, the first discovery round, building a simulated tree)
    and the first publish frees megabytes that glibc keeps mapped; a node then runs for weeks
    at that size. Called at the end of start-up and after the first publish. Where
    the C library has no ``malloc_trim`` (musl), nothing is done.
    """
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class Node:
    """All of drakit's node-side services in one object.

    Args:
        settings: the validated configuration (``node_name`` defaults as in the CLI).
        kube: the API client; ``None`` runs without a cluster (no publishing; claims must come
            from ``claims``).
        claims: where the pipeline reads ResourceClaims (default: ``kube``).
        instance_id: makes socket names unique for rolling updates (the pod UID in a
            DaemonSet); default: a random id.
        boot_id: the node's boot ID (default: read from the kernel).
        serve_kubelet: start the kubelet sockets (the demo and benchmarks may call the
            pipelines directly instead).
    """

    def __init__(
        self,
        settings: DrakitSettings,
        *,
        kube: KubeClient | None = None,
        claims: ClaimSource | None = None,
        instance_id: str | None = None,
        boot_id: str | None = None,
        serve_kubelet: bool = True,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.claims = claims or kube
        self.instance_id = instance_id or os.environ.get("POD_UID") or uuid.uuid4().hex[:12]
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.serve_kubelet = serve_kubelet
        self.metrics = Metrics()
        self.host: PluginHost | None = None
        self.states: dict[str, DriverState] = {}
        self.servers: dict[str, KubeletPluginServer] = {}
        self.health: dict[str, HealthBroadcaster] = {}
        self.publisher: ResourceSlicePublisher | None = None
        self.probes: ProbeServer | None = None
        self._inventory: Inventory | None = None
        self._unhealthy: Unhealthy = set()
        self._failed: dict[str, str] = {}
        self._stack = ExitStack()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._daemon = False  # set by run(): this node is the process's entry point
        self._labels: LabelKeeper | None = None
        self._label_parts: dict[str, dict[str, str]] = {}
        self.enforcer: Enforcer | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start every service; on failure everything started is stopped again.

        Raises:
            DrakitError: configuration, plugin or socket problems (one clear message).
        """
        try:
            self._start()
        except BaseException:
            self.stop(grace=0)
            raise

    def _start(self) -> None:
        s = self.settings
        if self.serve_kubelet:
            # before anything else allocates: see grpc_initialised (the node's peak memory)
            self._stack.enter_context(grpc_initialised())
        self.host = self._stack.enter_context(open_host(s))
        self.host.on_plugin_error = self._plugin_error
        for plugin, ctx in self.host.contexts.items():
            ctx.skipped.listener = functools.partial(self._skipped, plugin, ctx.driver_name)
        contexts = dict(self.host.contexts)
        self.metrics.skipped_items = lambda: {
            (c.driver_name, kind, reason): n
            for c in contexts.values()
            for (kind, reason), n in c.skipped.counts().items()
        }
        self._inventory = Inventory(self.host, isolate=True)  # one backend cannot stop the rest
        node_name = self.host.node.name
        if self._daemon:
            # Imports and plugin loading made most of the objects this process will hold:
            # collect once here and move the survivors to the permanent generation, so the
            # first discovery round does not pay the pending full collection and no later one
            # traverses them again. Only as the process's entry point (run): in a host
            # process (tests, embedding) freezing would keep its cyclic garbage forever.
            gc.collect()
            gc.freeze()
        node = self._node_at_start(node_name)
        inventory = self.refresh()
        if self.claims is None:
            raise PermanentError(
                "no cluster configured: pass --kubeconfig (or run in a pod) so claims can be read"
            )
        for driver in sorted(set(self.host.driver_names().values())):
            state = DriverState(
                driver,
                self.host,
                self.claims,
                state_dir=s.state_dir,
                cdi_dir=s.cdi_dir,
                boot_id=self.boot_id,
                on_repair=functools.partial(self._repaired, driver),
                observer=self.metrics,
                inventory=self._inventory,
                device_root=s.device_root,
                device_root_mount=s.device_root_mount,
                device_metadata=s.device_metadata,
                guard=(
                    functools.partial(guard_mount, s.state_dir, driver)
                    if s.nri.enabled and s.nri.fail_closed
                    else None
                ),
            )
            self.states[driver] = state
            try:  # networkData a crash kept from the API server (written in the background)
                state.resume_device_status()
            except DrakitError as e:  # the checkpoint cannot be read: prepare reports it
                log.warning("driver %s: networkData not rewritten at start: %s", driver, e)
            self.health[driver] = HealthBroadcaster(self._default_health(driver))
            if self.serve_kubelet:
                server = KubeletPluginServer(
                    driver,
                    state,
                    kubelet_dir=s.kubelet_dir,
                    instance_id=self.instance_id,
                    health_source=self.health[driver],
                    health_interval=s.health.resend,
                    serialize=False,  # DriverState serialises per driver, after the claim GETs
                )
                server.start()
                self.servers[driver] = server
        if self.kube is not None and s.topology_labels.enabled:
            self._labels = LabelKeeper(self.kube, node_name)
        if s.nri.enabled:
            self._start_nri()
        if self.kube is not None:
            self.publisher = ResourceSlicePublisher(
                self.kube,
                node_name,
                self._desired,
                drivers=set(self.states),
                interval=s.discovery.interval,
                owner_node_uid=(node or {}).get("metadata", {}).get("uid"),
                # the first publish (discovery, rendering, the LIST and the writes) frees what
                # the start-up's own trim could not yet give back
                on_first_sync=_return_free_heap if self._daemon else None,
                # what this start discovered, with the Node's labels: the first publish need
                # not discover again (without the Node, the labels are unknown: it does)
                discovered=None if node is None else self._with_health_taints(inventory),
            )
            publisher = self.publisher
            self._the_host().dropped_fields = publisher.dropped_fields
            self.metrics.slice_writes = lambda: {
                "create": publisher.writes.creates,
                "update": publisher.writes.updates,
                "delete": publisher.writes.deletes,
            }
            self.metrics.devices_rejected = publisher.rejected_by_driver
            self._spawn("publisher", self._run_publisher)
        self.metrics.prepared_claims = lambda: {
            d: len(st.prepared_claims()) for d, st in self.states.items()
        }
        self._spawn("health", self._health_loop)
        if s.metrics.enabled:
            self.probes = ProbeServer(
                self.metrics, self.ready, address=s.metrics.address, port=s.metrics.port
            )
            self.probes.start()
        log.info(
            "drakit node %s serving drivers %s (instance %s)",
            node_name,
            ", ".join(sorted(self.states)),
            self.instance_id,
        )
        if self._daemon:
            _return_free_heap()

    def _start_nri(self) -> None:
        """Drakit's NRI plugin: enforcement of the claims inside containers (docs/nri.md)."""
        from drakit.enforce.enforcer import Enforcer  # noqa: PLC0415 - NRI only when enabled
        from drakit.nri import Plugin  # noqa: PLC0415

        nri = self.settings.nri
        for driver in self.states:  # the guard's source must never exist
            source = guard_mount(self.settings.state_dir, driver, "x").host_path
            with suppress(FileNotFoundError):
                os.unlink(source)
                log.warning("removed %s: it must not exist (the NRI fail-closed guard)", source)
        self.enforcer = Enforcer(
            self._the_host(),
            self.device_index,
            memory_nodes=nri.memory_nodes,
            network_data=self._network_data,
            # of two instances on the node (a rolling update) only one may be registered
            lock_path=self.settings.state_dir / "nri.lock",
        )
        plugin = Plugin(
            self.enforcer,
            name=nri.plugin_name,
            index=nri.plugin_index,
            socket_path=nri.socket,
        )
        for state in self.states.values():
            state.on_change = self.enforcer.held_changed
        self.enforcer.start(plugin)
        log.info(
            "NRI: enforcing through %s as %s-%s (fail closed: %s)",
            nri.socket,
            nri.plugin_index,
            nri.plugin_name,
            "on" if nri.fail_closed else "off",
        )

    def device_index(self) -> DeviceIndex:
        """What every driver holds now, from the checkpoints (the NRI plugin's view)."""
        host = self._the_host()
        by_cdi: dict[str, Holding] = {}
        held: dict[tuple[str, str], list[PreparedDevice]] = {}
        pods: dict[str, list[tuple[str, str]]] = {}
        claim_devices: dict[tuple[str, str], dict[str, list[PreparedDevice]]] = {}
        plugins = {d: host.plugins_for_driver(d) for d in self.states}
        for driver, state in self.states.items():
            for uid, rec in state.prepared_claims().items():
                if rec.phase == ClaimPhase.PREPARE_COMPLETED:
                    claim_devices[(driver, uid)] = rec.prepared
                    for pod in rec.reserved_for:
                        pods.setdefault(pod, []).append((driver, uid))
                admin = set(rec.admin_requests)
                for plugin, devices in rec.prepared.items():
                    mine = held.setdefault((driver, plugin), [])
                    mine.extend(p for p in devices if p.request not in admin)
                    if rec.phase != ClaimPhase.PREPARE_COMPLETED:
                        continue
                    for p in devices:
                        for r in rec.results:
                            if p.request in r.requests and (p.pool, p.device) == (r.pool, r.device):
                                for cdi in r.cdi_device_ids:
                                    by_cdi[cdi] = Holding(driver, plugin, uid, p)
        return DeviceIndex(
            by_cdi=by_cdi, held=held, plugins=plugins, pods=pods, claim_devices=claim_devices
        )

    def _network_data(
        self, driver: str, claim_uid: str, plugin: str, devices: Sequence[PreparedDevice]
    ) -> None:
        self.states[driver].record_network_data(claim_uid, plugin, devices)

    def _run_publisher(self) -> None:
        if self.publisher is not None:
            inv = self.inventory
            if inv is not None:  # the first publish does not discover: label from start-up's
                self._sync_labels(inv)
            self.publisher.run(self._stop)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting calls, finish those in flight, remove sockets; leave the slices."""
        self._stop.set()

        def stop_server(server: KubeletPluginServer) -> None:
            try:
                server.stop(grace)
            except Exception:  # keep stopping the rest
                log.exception("stopping the kubelet server of %s failed", server.driver_name)

        # All drivers stop accepting at once and share one grace period.
        stoppers = [
            threading.Thread(target=stop_server, args=(s,), name=f"stop-{s.driver_name}")
            for s in self.servers.values()
        ]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
        for t in self._threads:
            t.join(timeout=max(grace, 1.0))
        if self.enforcer is not None:
            self.enforcer.stop()
        for state in self.states.values():
            state.close()
        if (
            self._labels is not None
            and self.host is not None
            and self.settings.topology_labels.remove_on_exit
        ):
            self._labels.remove(self.host.node.labels)
        if self.probes is not None:
            self.probes.stop()
        self._stack.close()

    def run(self) -> None:
        """Start, then block until SIGTERM or SIGINT, then stop gracefully."""
        done = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            done.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self._daemon = True
        self.start()
        done.wait()
        self.stop()

    def ready(self) -> tuple[bool, str]:
        """Readiness: sockets serving and, with a cluster, slices published."""
        if self._stop.is_set():
            return False, "shutting down"
        if self.serve_kubelet and not all(s.running for s in self.servers.values()):
            return False, "kubelet sockets not serving"
        if self.publisher is not None and not self.publisher.synced:
            why = self.publisher.last_error or "pending"
            return False, f"ResourceSlices not published: {why}"
        nri = self.nri_state()  # standby: the other instance of a rolling update serves NRI
        if self.settings.nri.fail_closed and nri in (NriState.ABSENT, NriState.CONNECTING):
            # fail closed: no container with a drakit claim can start until NRI is back
            return False, f"NRI plugin {nri.value} ({self.settings.nri.socket}); fail_closed is on"
        inv = self.inventory
        if inv is not None and inv.failed:
            names = "; ".join(f"{p}: {e}" for p, e in sorted(inv.failed.items()))
            return False, f"backends not started (the others are served): {names}"
        return True, "ok"

    def nri_state(self) -> NriState:
        """Drakit's NRI plugin: disabled, absent (no socket), connecting or connected."""
        return NriState.DISABLED if self.enforcer is None else self.enforcer.state()

    # -- inventory -----------------------------------------------------------------------------

    def _the_host(self) -> PluginHost:
        if self.host is None:
            raise PermanentError("the node is not started")
        return self.host

    @property
    def inventory(self) -> InventorySnapshot | None:
        """The current inventory snapshot (``None`` before the first discovery round)."""
        inv = self._inventory
        return inv.current if inv is not None and inv.discovered else None

    def refresh(self) -> InventorySnapshot:
        """Re-discover; the new snapshot becomes the one the prepare pipeline reads."""
        if self._inventory is None:
            raise PermanentError("the node is not started")
        inv = self._inventory.refresh()
        self._report_failed(inv)
        counts: dict[str, int] = {}
        for spec in inv.pools:
            counts[spec.driver] = counts.get(spec.driver, 0) + len(spec.devices)
        for driver, n in counts.items():
            self.metrics.devices_published.labels(driver=driver).set(n)
        return inv

    def _report_failed(self, inv: InventorySnapshot) -> None:
        """An Event on the Node for each backend that newly failed to start (logged already)."""
        new = {p: e for p, e in inv.failed.items() if self._failed.get(p) != e}
        self._failed = dict(inv.failed)
        if not new or self.kube is None or self.host is None:
            return
        for plugin, error in sorted(new.items()):
            try:
                self.kube.create_event(
                    {"kind": "Node", "apiVersion": "v1", "name": self.host.node.name},
                    "BackendUnavailable",
                    f"backend {plugin!r} could not discover its devices and is not served "
                    f"(the other backends are): {error}",
                )
            except DrakitError:
                log.warning("could not record an Event for backend %s", plugin, exc_info=True)

    def _skipped(self, plugin: str, driver: str, item: SkippedItem) -> None:
        """A Warning Event on the Node naming an item a backend newly left out (and a log line)."""
        log.debug("backend %s leaves out %s %s (%s)", plugin, item.kind, item.item, item.reason)
        if self.kube is None or self.host is None:
            return
        reason = {
            "device": "DeviceSkipped",
            "label": "NodeLabelIgnored",
            "health": "HealthWatchingOff",
        }[item.kind]
        try:
            self.kube.create_event(
                {"kind": "Node", "apiVersion": "v1", "name": self.host.node.name},
                reason,
                f"{driver} ({plugin}): {item.kind} {item.item}: {item.message}",
            )
        except DrakitError:
            log.warning("could not record an Event for %s %s", item.kind, item.item, exc_info=True)

    def _node_at_start(self, name: str) -> dict[str, Any] | None:
        """The Node, read before the first discovery so the backends see its labels.

        ``None`` without a cluster, when there is no such Node, or when the API server is
        unreachable or does not answer within ``_NODE_AT_START_TIMEOUT`` (logged: the kubelet
        is served anyway, and the first publish reads the labels).
        """
        if self.kube is None:
            return None
        try:
            # before the kubelet is served: a hung API server may hold that up this long only
            node = self.kube.get_node(name, timeout=_NODE_AT_START_TIMEOUT)
        except RetryableError as e:  # an API outage must not stop the kubelet service
            log.warning(
                "API server unreachable at start-up (%s): serving the kubelet anyway "
                "(unprepare works from the checkpoint, prepare answers retry); ResourceSlices "
                "are published when it is back",
                e,
            )
            return None
        self._adopt_labels(node)
        return node

    def _read_node_labels(self) -> None:
        """Hand the backends the Node's labels (``NodeInfo.labels``); on an API error keep them."""
        host = self._the_host()
        if self.kube is None:
            return
        try:
            node = self.kube.get_node(host.node.name)
        except DrakitError as e:
            log.warning("could not read the Node's labels, keeping the last ones: %s", e)
            return
        self._adopt_labels(node)

    def _adopt_labels(self, node: Mapping[str, Any] | None) -> None:
        host = self._the_host()
        labels = dict(((node or {}).get("metadata") or {}).get("labels") or {})
        if labels != host.node.labels:
            host.node = host.node.model_copy(update={"labels": labels})

    def _desired(self) -> Sequence[PoolSpec]:
        self._read_node_labels()
        try:
            inv = self.refresh()
        except DrakitError:
            log.exception("discovery failed; keeping the previous devices")
            if self.inventory is None:
                raise
            inv = self.inventory
        else:
            self._sync_labels(inv)
        return self._with_health_taints(inv)

    def topology_labels(self, inv: InventorySnapshot) -> dict[str, str]:
        """The ``topology.drakit.io/`` labels the backends give for ``inv`` (checked, merged)."""
        host = self._the_host()
        mine: dict[str, dict[DeviceKey, Device]] = {}
        for key, plugin, device in inv.devices():
            mine.setdefault(plugin, {})[key] = device
        parts = keep_failed(host.node_labels(mine), self._label_parts, inv.failed)
        self._label_parts = parts
        return merge_labels(parts)

    def _sync_labels(self, inv: InventorySnapshot) -> None:
        """Make the Node's ``topology.drakit.io/`` labels what the backends say for ``inv``."""
        if self._labels is None or self.host is None:
            return
        try:
            desired = self.topology_labels(inv)
        except DrakitError:
            log.exception("node labels: keeping the Node's labels as they are")
            return
        if self._labels.sync(self.host.node.labels, desired):
            self._adopt_labels_written(desired)

    def _adopt_labels_written(self, desired: Mapping[str, str]) -> None:
        """What the Node carries after a sync (read again before the next round anyway)."""
        host = self._the_host()
        labels = {k: v for k, v in host.node.labels.items() if not k.startswith(LABEL_PREFIX)}
        labels.update(desired)
        if labels != host.node.labels:
            host.node = host.node.model_copy(update={"labels": labels})

    def publishable(self) -> Sequence[PoolSpec]:
        """The pools as the publisher would publish them now (the test kit's view).

        Discovered afresh, with the unhealthy devices tainted when ``health.taint_unhealthy``
        is set.
        """
        return self._with_health_taints(self.refresh())

    def _with_health_taints(self, inv: InventorySnapshot) -> Sequence[PoolSpec]:
        """``inv``'s pools, with the unhealthy devices tainted when configured."""
        return with_health_taints(inv, self._unhealthy, taint=self.settings.health.taint_unhealthy)

    # -- health --------------------------------------------------------------------------------

    def _default_health(self, driver: str) -> list[DeviceHealth]:
        return default_health(self.inventory, driver)

    def poll_health(self) -> None:
        """Ask every plugin for device health and push it to the kubelet streams."""
        host = self._the_host()
        try:
            reported = host.health()
        except DrakitError:
            log.exception("health poll failed")
            return
        per_driver, unhealthy = assess_health(host, self.inventory, reported, list(self.health))
        for driver, items in per_driver.items():
            if driver in self.health:
                self.health[driver].update(items.values())
        changed = unhealthy != self._unhealthy
        self._unhealthy = unhealthy
        # republish on any change: core's own taint (``taint_unhealthy``) or a backend's taints
        # (set on its devices at discovery, e.g. the NVIDIA backend's XID taint) must not wait
        # for the next discovery interval
        if changed and self.publisher is not None:
            self.publisher.trigger(rediscover=True)

    def _health_loop(self) -> None:
        while not self._stop.wait(self.settings.health.interval):
            self.poll_health()

    def _plugin_error(self, plugin: str, hook: str) -> None:
        self.metrics.plugin_errors.labels(plugin=plugin, hook=hook).inc()

    def _repaired(self, driver: str, reason: str, message: str, count: int) -> None:
        self.metrics.checkpoint_repairs.labels(driver=driver).inc(count)
        if reason == "reboot" or self.kube is None or self.host is None:
            return
        try:
            self.kube.create_event(
                {"kind": "Node", "apiVersion": "v1", "name": self.host.node.name},
                "CheckpointCorrupt" if reason == "corrupt" else "CheckpointRecovered",
                message,
            )
        except DrakitError:
            log.warning("could not record an Event for the corrupt checkpoint", exc_info=True)
