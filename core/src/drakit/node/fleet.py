"""A simulated fleet: many node identities publishing through drakit's own publisher.

What a DaemonSet of ``drakit node`` does to the API server, for N nodes, without N processes
(``drakit fleet``, ``docs/fleet.md``). Each simulated node is a fake Node object and one
:class:`~drakit.publish.publisher.ResourceSlicePublisher` of its own, running its own loop: its
own watch on its slices, its own periodic resync (a LIST) and its own writes, exactly as a node's.
What the nodes share inside one process is what a real fleet would not: discovery runs once per
shape (a simulated profile under a configuration, read through the same host and inventory code
as ``drakit node``), every node of a shape publishes that shape's pools under its own node and
pool name, and non-watch requests share one process's connection pool.

A shape is either a simulated-hardware profile (``drakit sim list``) discovered under the given
configuration, or :data:`EXAMPLE_GPU`: the slices of upstream's ``dra-example-kubeletplugin
--device-profile gpu`` (8 plain GPUs: ``index``, ``uuid``, ``model``, ``driverVersion``;
``memory`` 80Gi and ``compute`` 100), the simplest driver, for comparisons.

The simulator is reached through :func:`drakit.host.startup.open_host` (the ``drakit.simulator``
entry point), as ``drakit node --profile`` reaches it; nothing here imports ``drakit.sim``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drakit.errors import ConflictError, DrakitError
from drakit.host.inventory import build_inventory
from drakit.host.settings import load_settings
from drakit.host.startup import open_host
from drakit.models import Device, DeviceAttribute, DeviceCapacity
from drakit.publish.publisher import ResourceSlicePublisher
from drakit.publish.render import PoolSpec

if TYPE_CHECKING:
    from drakit.kube import KubeClient

__all__ = [
    "EXAMPLE_GPU",
    "FLEET_LABEL",
    "SHAPE_LABEL",
    "Fleet",
    "FleetNode",
    "Shape",
    "assign_shapes",
    "example_gpu_shape",
    "load_shape",
    "node_object",
    "rss_kib",
]

logger = logging.getLogger(__name__)

EXAMPLE_GPU = "example-gpu"
"""The shape name of upstream's example driver's slices (8 plain GPUs, ``gpu.example.com``)."""

FLEET_LABEL = "fleet.drakit.io/name"
"""Label on every fake Node: the fleet's name (``--prefix``); ``drakit fleet delete`` uses it."""

SHAPE_LABEL = "fleet.drakit.io/shape"
"""Label on every fake Node: its shape (a profile name or ``example-gpu``)."""

_TEMPLATE = "drakit-fleet-template"
"""The node name the shapes are discovered under; replaced by each node's own name."""


@dataclass(frozen=True)
class Shape:
    """What every node of one shape publishes: pools discovered once, under a template name.

    Attributes:
        name: A profile name, or :data:`EXAMPLE_GPU`.
        pools: The pools as discovered for the template node.
    """

    name: str
    pools: tuple[PoolSpec, ...]

    @property
    def drivers(self) -> frozenset[str]:
        """The drivers whose slices a node of this shape owns."""
        return frozenset(p.driver for p in self.pools)

    @property
    def devices(self) -> int:
        """Devices per node."""
        return sum(len(p.devices) for p in self.pools)

    @property
    def counter_sets(self) -> int:
        """Shared counter sets per node."""
        return sum(len(p.counter_sets) for p in self.pools)

    def for_node(self, node: str) -> tuple[PoolSpec, ...]:
        """The pools as node ``node`` publishes them (the node's own pool renamed after it).

        Devices and counter sets are shared with the template (they are immutable).
        """
        return tuple(
            replace(p, node=node, pool=node if p.pool == _TEMPLATE else p.pool) for p in self.pools
        )


def example_gpu_shape(gpus: int = 8) -> Shape:
    """Upstream's ``dra-example-kubeletplugin --device-profile gpu`` slices, as a shape.

    ``internal/profiles/gpu/gpu.go`` of sigs.k8s.io/dra-example-driver (no partitions): devices
    ``gpu-<i>`` with ``index``, ``uuid``, ``model`` ``LATEST-GPU-MODEL``, ``driverVersion``
    ``1.0.0``, capacities ``memory`` 80Gi and ``compute`` 100, one pool named after the node.
    """
    devices = tuple(
        Device(
            name=f"gpu-{i}",
            attributes={
                "index": DeviceAttribute(int=i),
                "uuid": DeviceAttribute(string=f"gpu-{uuid.UUID(int=i + 1)}"),
                "model": DeviceAttribute(string="LATEST-GPU-MODEL"),
                "driverVersion": DeviceAttribute(version="1.0.0"),
            },
            capacity={
                "memory": DeviceCapacity(value="80Gi"),
                "compute": DeviceCapacity(value="100"),
            },
        )
        for i in range(gpus)
    )
    return Shape(
        EXAMPLE_GPU,
        (PoolSpec(driver="gpu.example.com", node=_TEMPLATE, pool=_TEMPLATE, devices=devices),),
    )


def load_shape(name: str, config: Path | None = None) -> Shape:
    """Discover one shape: :data:`EXAMPLE_GPU`, or a simulated profile under ``config``.

    The profile goes through the same host and inventory code as ``drakit node --profile``
    (the configuration's backends, strategies and presets).

    Raises:
        ValueError: the profile is unknown (the message lists the known ones).
        DrakitError: the configuration or discovery failed.
    """
    if name == EXAMPLE_GPU:
        return example_gpu_shape()
    settings = load_settings(config, overrides={"profile": name, "node_name": _TEMPLATE})
    with open_host(settings) as host:
        inventory = build_inventory(host)
    if not inventory.pools:
        raise DrakitError(f"profile {name!r} publishes no devices under this configuration")
    return Shape(name, inventory.pools)


def assign_shapes(names: Sequence[str], shapes: Sequence[str]) -> list[tuple[str, str]]:
    """``(node, shape)`` for every node, shapes taken in turn (any part of the list mixes)."""
    if not shapes:
        raise ValueError("at least one shape is needed")
    return [(n, shapes[i % len(shapes)]) for i, n in enumerate(names)]


def node_object(name: str, fleet: str, shape: str) -> dict[str, Any]:
    """A fake, schedulable, Ready Node (status set at create time; nothing heartbeats it)."""
    resources = {"cpu": "224", "memory": "2Ti", "pods": "110"}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FLEET_LABEL: fleet,
                SHAPE_LABEL: shape,
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated node of drakit fleet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def rss_kib() -> int:
    """This process's resident set size (``VmRSS``), KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0  # pragma: no cover - every Linux has VmRSS


@dataclass
class FleetNode:
    """One simulated node: its Node's name and UID, its shape, its own publisher."""

    name: str
    shape: Shape
    uid: str = ""
    publisher: ResourceSlicePublisher | None = None
    thread: threading.Thread | None = None
    first: threading.Event = field(default_factory=threading.Event)
    """Set once the node's first sync succeeded (its slices are published)."""


@dataclass
class Fleet:
    """Simulated nodes in this process, each publishing through its own publisher.

    Args:
        kube: The API client (shared; its connection pool should hold one watch per node).
        nodes: ``(node name, shape)`` pairs.
        fleet: The fleet's name (the Nodes' :data:`FLEET_LABEL`).
        interval: Seconds between each node's periodic resyncs (``discovery.interval``).
        concurrency: Threads registering Nodes; nodes starting at the same time.
    """

    kube: KubeClient
    nodes: Sequence[tuple[str, Shape]]
    fleet: str
    interval: float = 60.0
    concurrency: int = 8
    members: list[FleetNode] = field(init=False)
    _stop: threading.Event = field(init=False, default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.members = [FleetNode(n, s) for n, s in self.nodes]

    def _each(self, fn: Callable[[FleetNode], None]) -> None:
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            for _ in pool.map(fn, self.members):
                pass

    def register(self) -> None:
        """Create every Node (or adopt one of the same name, labelled for this fleet)."""
        self._each(self._register)

    def _register(self, member: FleetNode) -> None:
        body = node_object(member.name, self.fleet, member.shape.name)
        try:
            created = self.kube.request("POST", "/api/v1/nodes", body=body)
        except ConflictError:  # a restarted fleet: the Node is there already
            created = self.kube.request("GET", f"/api/v1/nodes/{member.name}")
            labels = created.get("metadata", {}).get("labels") or {}
            if labels.get(FLEET_LABEL) != self.fleet:
                raise DrakitError(
                    f"Node {member.name} exists and is not part of fleet {self.fleet!r} "
                    f"(label {FLEET_LABEL}); choose another --prefix"
                ) from None
        member.uid = str(created["metadata"]["uid"])
        pools = member.shape.for_node(member.name)
        member.publisher = ResourceSlicePublisher(
            self.kube,
            member.name,
            lambda: pools,
            drivers=set(member.shape.drivers),
            interval=self.interval,
            owner_node_uid=member.uid,
            record_events=False,
            on_first_sync=member.first.set,
            discovered=pools,
        )

    def publish_once(self) -> None:
        """Publish every node's slices once, ``concurrency`` at a time, and start no loop."""
        self._each(self._publish_once)

    @staticmethod
    def _publish_once(member: FleetNode) -> None:
        assert member.publisher is not None  # noqa: S101 - register() ran
        member.publisher.sync_once(rediscover=False)

    def start(self) -> None:
        """Start every node's publisher loop (a rolling start); return when every one published.

        ``concurrency`` nodes start at a time; the next starts when one of them has published
        its first slices (its loop's first sync: a LIST and the creates). Each loop then runs
        as a node's does: its watch, its periodic resync, its writes.
        """
        self._each(self._start_one)

    def _start_one(self, member: FleetNode) -> None:
        assert member.publisher is not None  # noqa: S101 - register() ran
        member.thread = threading.Thread(
            target=member.publisher.run,
            args=(self._stop,),
            name=f"fleet-{member.name}",
            daemon=True,
        )
        member.thread.start()
        while not member.first.wait(0.5) and not self._stop.is_set():
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every loop; the slices stay published (as a node's do on shutdown)."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for m in self.members:
            if m.thread is not None:
                m.thread.join(max(0.0, deadline - time.monotonic()))

    def publishers(self) -> Iterable[ResourceSlicePublisher]:
        """The nodes' publishers (registered ones)."""
        return (m.publisher for m in self.members if m.publisher is not None)

    def counts(self) -> dict[str, int]:
        """Cumulative counts over the nodes: syncs, writes by kind, failed syncs, synced nodes."""
        out = {"syncs": 0, "creates": 0, "updates": 0, "deletes": 0, "errors": 0, "synced": 0}
        for p in self.publishers():
            out["syncs"] += p.syncs
            out["creates"] += p.writes.creates
            out["updates"] += p.writes.updates
            out["deletes"] += p.writes.deletes
            out["errors"] += p.sync_errors
            out["synced"] += int(bool(p.synced))
        return out
