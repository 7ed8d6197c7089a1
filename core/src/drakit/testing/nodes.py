"""Simulated nodes, plugin hosts and in-process drakit nodes for a backend's tests.

Everything here runs the code a real node runs: :func:`open_host` goes through
:func:`drakit.host.startup.open_host` (the plugin host, the simulated root's vendor-library
stand-ins), :func:`run_node` starts a :class:`drakit.node.daemon.Node` that serves the real kubelet
gRPC sockets, and :class:`KubeletSide` calls them over the wire as the kubelet does. Only the
hardware is simulated (a tree from :mod:`drakit.sim`) and the API server is replaced by
:class:`ClaimStore`, the in-memory claim source of :mod:`drakit.prepare.memory`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel

from drakit.errors import PermanentError
from drakit.host.discovery import Discovered
from drakit.host.inventory import InventorySnapshot, build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp
from drakit.host.startup import open_host as _runtime_host
from drakit.kubelet.client import KubeletClient
from drakit.models import (
    ClaimInfo,
    ClaimPrepareResult,
    ClaimRef,
    ClaimUnprepareResult,
    DeviceHealth,
    PreparedDevice,
    PreparedDeviceRef,
)
from drakit.node.daemon import Node
from drakit.prepare.cdi import CdiWriter
from drakit.prepare.memory import DEFAULT_NAMESPACE, ClaimStore
from drakit.prepare.metadata import CONTAINER_DIR as METADATA_DIR
from drakit.prepare.metadata import read_metadata
from drakit.publish.render import render_pool
from drakit.sim import MachineSpec, SysfsBuilder, build_profile
from drakit.testing.dropped import DroppedFields, fields_dropped
from drakit.testing.published import Published

__all__ = [
    "CLAIM_NAMESPACE",
    "ClaimStore",
    "KubeletSide",
    "PrepareOutcome",
    "RunningNode",
    "SimHost",
    "SimNode",
    "allocated_claim",
    "build_sim_node",
    "open_host",
    "run_node",
]

_R = TypeVar("_R", ClaimPrepareResult, ClaimUnprepareResult)

CLAIM_NAMESPACE = DEFAULT_NAMESPACE
"""The namespace :func:`allocated_claim` puts claims in unless told otherwise."""

_KIT_KEYS = ("sysfs_root", "profile", "node_name", "kubelet_dir", "cdi_dir", "state_dir")
"""Configuration keys the kit sets itself (from the :class:`SimNode` and the node's dirs)."""

# -- simulated nodes -------------------------------------------------------------------------


@dataclass(frozen=True)
class SimNode:
    """A simulated node's host root, built from a profile.

    Attributes:
        root: the host root; discovery reads ``root/sys`` and ``root/proc`` (what
            ``sysfs_root`` names in drakit's configuration).
        profile: the profile the tree was built from.
        node_name: the node's name; also the name of its default pool.
    """

    root: Path
    profile: str
    node_name: str = "node-1"


def build_sim_node(profile: str | MachineSpec, root: Path, *, node_name: str = "node-1") -> SimNode:
    """Build a simulated node's tree under ``root`` (missing or empty).

    A spec is built as :func:`drakit.sim.build_profile` builds a profile's, and is not
    registered: the profile registry (what ``--profile`` finds) is left as it was.

    Args:
        profile: a profile name (built-in, registered with :func:`drakit.sim.register_profile`
            or installed through the ``drakit.profiles`` entry point group), or a
            :class:`drakit.sim.MachineSpec` (e.g. a variant of a profile made with
            :func:`dataclasses.replace`).
        root: where to write the tree.
        node_name: the node's name.

    Raises:
        UnknownProfileError: no profile has that name; the message lists the known ones.
        FileExistsError: ``root`` is not empty.
    """
    if isinstance(profile, str):
        build_profile(profile, root)
        return SimNode(root=root, profile=profile, node_name=node_name)
    SysfsBuilder(profile).build(root)  # what build_profile does, without registering a name
    return SimNode(root=root, profile=profile.name, node_name=node_name)


def _settings(config: Mapping[str, Any], node: SimNode, **paths: Any) -> DrakitSettings:
    """The settings for ``config`` on ``node`` (``DRAKIT_*`` variables are not read)."""
    taken = sorted(k for k in _KIT_KEYS if k in config)
    if taken:
        raise ValueError(
            f"config sets {', '.join(taken)}: the kit sets these from the SimNode and its "
            "temporary directories; remove them"
        )
    return DrakitSettings.model_validate(
        {**config, "sysfs_root": node.root, "node_name": node.node_name, **paths}
    )


# -- plugin hosts ----------------------------------------------------------------------------


class SimHost:
    """A plugin host on a simulated node (what :func:`open_host` returns).

    The methods are those of :class:`drakit.host.pluginhost.PluginHost` a backend's tests use;
    :attr:`host` is the plugin host itself for anything else.
    """

    def __init__(self, host: PluginHost, stack: ExitStack, node: SimNode) -> None:
        self.host = host
        self.node = node
        """The simulated node."""
        self._stack = stack

    @property
    def backends(self) -> Mapping[str, object]:
        """Plugin name -> the backend object the host built."""
        return self.host.backends

    def driver_names(self) -> dict[str, str]:
        """Plugin name -> DRA driver name."""
        return self.host.driver_names()

    def driver_of(self, plugin: str) -> str:
        """The DRA driver name of ``plugin``.

        Raises:
            KeyError: the plugin is not loaded.
        """
        return self.host.driver_names()[plugin]

    def discover(self) -> Discovered:
        """One discovery round (discovery, enrichment, composition) across all backends."""
        return self.host.discover()

    def inventory(self) -> InventorySnapshot:
        """Discover and group into pools, as the node publishes them."""
        return build_inventory(self.host)

    def slices(self) -> list[dict[str, Any]]:
        """The ResourceSlices a node would publish (rendered and checked; raises on a bad one).

        Raises:
            SliceValidationError: a device breaks an API rule; the message names it.
        """
        return self.inventory().slices()

    def published(self) -> Published:
        """What a node would publish, by device: attributes, counters, counter sets, taints.

        Raises:
            SliceValidationError: a device breaks an API rule; the message names it.
        """
        return Published.from_slices(self.slices())

    def drop_fields(self, gates_off: Iterable[str]) -> DroppedFields:
        """What an API server with ``gates_off`` would drop of what this node publishes.

        The backends are told, as a node's publisher tells them: from the next discovery on,
        :attr:`~drakit.context.PluginContext.dropped_fields` returns the dropped field names
        for their driver (``drop_fields(())`` tells them nothing is dropped any more). See
        :mod:`drakit.testing.dropped` for how the server is modelled.

        Raises:
            ValueError: a gate that guards no ResourceSlice field (the known ones are listed).
            SliceValidationError: a device breaks an API rule; the message names it.
        """
        report = fields_dropped(self.slices(), gates_off)
        self.host.dropped_fields = report.names
        return report

    def parse_config(self, driver: str, params: Mapping[str, Any]) -> BaseModel:
        """Validate an opaque config object through ``driver``'s backends.

        Raises:
            ConfigInvalid: the object is invalid or no backend of ``driver`` owns its kind.
        """
        return self.host.parse_config(driver, params)

    def health(self) -> dict[str, list[DeviceHealth]]:
        """Device health per plugin."""
        return self.host.health()

    def prepare(
        self, plugin: str, claim: ClaimInfo, held: Sequence[PreparedDevice] = ()
    ) -> list[PreparedDevice]:
        """Call ``plugin``'s prepare hook directly: no checkpoint, no CDI.

        :func:`run_node` runs the whole pipeline over the kubelet socket.
        """
        return self.host.prepare(plugin, claim, held)

    def hook_implementations(self, plugin: str) -> list[str]:
        """The hooks ``plugin`` implements."""
        return self.host.hook_implementations(plugin)

    def close(self) -> None:
        """Release what opening the host took (idempotent)."""
        self._stack.close()

    def __enter__(self) -> SimHost:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_host(config: Mapping[str, Any], node: SimNode) -> SimHost:
    """Load the backends of ``config`` on ``node``, as ``drakit node`` would.

    Args:
        config: a drakit configuration (the keys of the YAML file: ``plugins``,
            ``publish_strategy``...; ``plugins`` may be a list of names). The node's root and
            name come from ``node``; ``DRAKIT_*`` environment variables are not read.
        node: the simulated node; the host's state directory (where backends keep their
            state files) is ``var/lib/drakit`` under its root.

    Raises:
        ValueError: ``config`` sets a key the kit sets (``sysfs_root``, ``node_name``...).
        ConfigInvalid: the configuration is invalid.
        PluginLoadError: a backend is not installed or fails to start.
    """
    # backends' state files (PluginContext.state) stay inside the simulated node's tree
    settings = _settings(config, node, state_dir=node.root / "var" / "lib" / "drakit")
    stack = ExitStack()
    try:
        host = stack.enter_context(_runtime_host(settings))
    except BaseException:
        stack.close()
        raise
    return SimHost(host, stack, node)


# -- claims ----------------------------------------------------------------------------------


def allocated_claim(
    name: str,
    devices: Sequence[tuple[str, str, str]],
    *,
    pool: str = "node-1",
    config: Sequence[dict[str, Any]] = (),
    uid: str | None = None,
    namespace: str = CLAIM_NAMESPACE,
) -> dict[str, Any]:
    """An allocated ``resource.k8s.io/v1`` ResourceClaim, as the scheduler leaves it.

    Args:
        name: the claim's name.
        devices: ``(request, driver, device)`` per allocated device, in result order.
        pool: the pool of every device (the node's name for a node's default pool).
        config: ``status.allocation.devices.config`` entries (``{"requests": [...],
            "opaque": {"driver": ..., "parameters": {...}}}``); ``source`` defaults to
            ``FromClaim``.
        uid: the claim's UID (default: a random one).
        namespace: the claim's namespace.
    """
    counts: dict[tuple[str, str], int] = {}
    for request, driver, _ in devices:
        counts[(request, driver)] = counts.get((request, driver), 0) + 1
    requests = [
        {"name": request, "exactly": {"deviceClassName": driver, "count": n}}
        for (request, driver), n in counts.items()
    ]
    results = [
        {"request": request, "driver": driver, "pool": pool, "device": device}
        for request, driver, device in devices
    ]
    entries = [{"source": "FromClaim", **entry} for entry in config]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": requests}},
        "status": {"allocation": {"devices": {"results": results, "config": entries}}},
    }


def _ref(claim: Mapping[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(
        namespace=meta.get("namespace", CLAIM_NAMESPACE), name=meta["name"], uid=meta["uid"]
    )


def _results(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results: list[dict[str, Any]] = (alloc.get("devices") or {}).get("results") or []
    return results


# -- the kubelet side ------------------------------------------------------------------------


def _merge_edits(base: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """Spec-level edits then a device's (lists are concatenated, as the runtime applies them)."""
    out: dict[str, Any] = dict(base)
    for key, value in own.items():
        prev = out.get(key)
        out[key] = [*prev, *value] if isinstance(prev, list) and isinstance(value, list) else value
    return out


@dataclass(frozen=True)
class PrepareOutcome:
    """What NodePrepareResources answered for one claim, over every driver of the claim.

    Attributes:
        claim_uid: the claim.
        drivers: the drivers called, in order.
        devices: the prepared devices the drivers reported.
        error: the drivers' errors (``driver: error``, joined by ``; ``), ``None`` when none.
        cdi_dir: where drakit wrote the CDI specs.
    """

    claim_uid: str
    drivers: tuple[str, ...]
    devices: tuple[PreparedDeviceRef, ...]
    error: str | None
    cdi_dir: Path

    @property
    def cdi_ids(self) -> list[str]:
        """The CDI device IDs the kubelet hands the container runtime, in order."""
        return [i for d in self.devices for i in d.cdi_device_ids]

    def spec_files(self) -> list[Path]:
        """The claim's CDI spec files on disk (one per driver that wrote one)."""
        out = []
        for driver in self.drivers:
            path = self.cdi_dir / CdiWriter(self.cdi_dir, driver).spec_name(self.claim_uid)
            if path.is_file():
                out.append(path)
        return out

    def cdi_edits(self) -> dict[str, dict[str, Any]]:
        """CDI device ID -> the container edits the runtime applies for it, from the spec files.

        A spec's own ``containerEdits`` (claim-wide environment) come first, then the device's.
        Only IDs in :attr:`cdi_ids` are included; an ID with no device in the files is missing
        from the result (which is a bug in the backend or drakit).
        """
        found: dict[str, dict[str, Any]] = {}
        for path in self.spec_files():
            spec = json.loads(path.read_text(encoding="utf-8"))
            base = spec.get("containerEdits") or {}
            for dev in spec.get("devices") or []:
                cdi_id = f"{spec['kind']}={dev['name']}"
                found[cdi_id] = _merge_edits(base, dev.get("containerEdits") or {})
        return {i: found[i] for i in self.cdi_ids if i in found}

    def device_metadata(self) -> dict[str, list[dict[str, Any]]]:
        """The claim's KEP-5304 device metadata files: path in the container -> its objects.

        Read from the host paths the CDI mounts under
        ``/var/run/kubernetes.io/dra-device-attributes/`` name; each file is a stream of
        ``DeviceMetadata`` objects (``metadata.resource.k8s.io/v1beta1`` first, then
        ``v1alpha1``), whose ``requests[].devices[].attributes`` are the devices' attributes as
        the node publishes them (docs/architecture.md, "Device metadata").
        """
        out: dict[str, list[dict[str, Any]]] = {}
        for edits in self.cdi_edits().values():
            for mount in edits.get("mounts") or []:
                inside = str(mount.get("containerPath", ""))
                if inside.startswith(METADATA_DIR + "/") and inside not in out:
                    raw = Path(str(mount["hostPath"])).read_bytes()
                    out[inside] = [
                        d.model_dump(mode="json", by_alias=True, exclude_none=True)
                        for d in read_metadata(raw)
                    ]
        return out

    def env(self) -> dict[str, str]:
        """The environment the container gets from all of the claim's CDI devices."""
        out: dict[str, str] = {}
        for edits in self.cdi_edits().values():
            for item in edits.get("env") or []:
                key, _, value = str(item).partition("=")
                out[key] = value
        return out


class KubeletSide:
    """Calls a running node's kubelet sockets the way the kubelet does (gRPC, DRA v1).

    Each call opens the driver's registration socket, asks GetInfo for the DRA endpoint and
    calls it, as the kubelet's plugin manager does.
    """

    def __init__(self, sockets: Mapping[str, Path], cdi_dir: Path, *, timeout: float = 45) -> None:
        self.sockets = dict(sockets)
        """Driver -> its registration socket."""
        self.cdi_dir = cdi_dir
        self.timeout = timeout

    def _drivers(self, claim: Mapping[str, Any]) -> list[str]:
        drivers = sorted({str(r.get("driver")) for r in _results(claim)})
        return drivers or sorted(self.sockets)

    def _client(self, driver: str) -> KubeletClient:
        socket = self.sockets.get(driver)
        if socket is None:
            raise PermanentError(
                f"driver {driver!r} is not served by this node (serving: "
                f"{', '.join(sorted(self.sockets)) or 'none'})"
            )
        return KubeletClient(socket, timeout=self.timeout)

    def _on_each(
        self,
        ref: ClaimRef,
        drivers: Sequence[str],
        call: Callable[[str, Sequence[ClaimRef]], Mapping[str, _R]],
    ) -> tuple[list[_R], list[str]]:
        """``call`` for ``ref`` on every driver: the successful results, and each error named."""
        results: list[_R] = []
        errors: list[str] = []
        for driver in drivers:
            try:
                res = call(driver, [ref]).get(ref.uid)
            except PermanentError as e:
                errors.append(f"{driver}: {e}")
                continue
            if res is None:
                errors.append(f"{driver}: no result for claim {ref.uid}")
            elif res.error:
                errors.append(f"{driver}: {res.error}")
            else:
                results.append(res)
        return results, errors

    def prepare(self, claim: Mapping[str, Any]) -> PrepareOutcome:
        """NodePrepareResources for ``claim`` on every driver its allocation names.

        The claim must be in the node's claim source (``RunningNode.claims.add``), as it must
        be in the API server for a real node.
        """
        ref, drivers = _ref(claim), self._drivers(claim)
        results, errors = self._on_each(ref, drivers, self.prepare_batch)
        devices = [d for res in results for d in res.devices]
        return PrepareOutcome(
            claim_uid=ref.uid,
            drivers=tuple(drivers),
            devices=tuple(devices),
            error="; ".join(errors) or None,
            cdi_dir=self.cdi_dir,
        )

    def prepare_batch(self, driver: str, refs: Sequence[ClaimRef]) -> dict[str, ClaimPrepareResult]:
        """One NodePrepareResources call to ``driver`` for several claims; UID -> result.

        The kubelet batches a pod's claims this way; the results are as the driver answered.

        Raises:
            PermanentError: the node does not serve ``driver``.
        """
        with self._client(driver) as client:
            return client.prepare(list(refs))

    def unprepare_batch(
        self, driver: str, refs: Sequence[ClaimRef]
    ) -> dict[str, ClaimUnprepareResult]:
        """One NodeUnprepareResources call to ``driver`` for several claims.

        Raises:
            PermanentError: the node does not serve ``driver``.
        """
        with self._client(driver) as client:
            return client.unprepare(list(refs))

    def unprepare(self, claim: Mapping[str, Any]) -> str | None:
        """NodeUnprepareResources for ``claim``; the drivers' errors, ``None`` on success.

        Drivers are those the claim's allocation names (every served driver if it has none).
        """
        ref = _ref(claim)
        _, errors = self._on_each(ref, self._drivers(claim), self.unprepare_batch)
        return "; ".join(errors) or None


# -- running nodes ---------------------------------------------------------------------------


@dataclass
class RunningNode:
    """An in-process ``drakit node`` serving the kubelet sockets, without a cluster.

    Attributes:
        node: the :class:`drakit.node.daemon.Node`.
        claims: its claim source; :meth:`ClaimStore.add` a claim before preparing it.
        kubelet: the kubelet side of its sockets.
        sim: the simulated node it runs on.
        kubelet_dir: the kubelet root (``plugins_registry/`` and ``plugins/``).
        cdi_dir: where it writes CDI specs.
        state_dir: its state (checkpoints).
    """

    node: Node
    claims: ClaimStore
    kubelet: KubeletSide
    sim: SimNode
    kubelet_dir: Path
    cdi_dir: Path
    state_dir: Path

    @property
    def host(self) -> PluginHost:
        """The node's plugin host."""
        host = self.node.host
        if host is None:
            raise PermanentError("the node is not started")
        return host

    def driver_names(self) -> dict[str, str]:
        """Plugin name -> DRA driver name."""
        return self.host.driver_names()

    def inventory(self) -> InventorySnapshot:
        """Re-discover; the inventory the node now publishes from."""
        return self.node.refresh()

    def slices(self) -> list[dict[str, Any]]:
        """The ResourceSlices the node would publish, rendered (after a fresh discovery).

        Raises:
            SliceValidationError: a device breaks an API rule; the message names it.
        """
        return self.inventory().slices()

    def published(self) -> Published:
        """What the node publishes now, by device, health taints included.

        A fresh discovery, with drakit's ``drakit.io/unhealthy`` taint on the devices the
        node's health loop found Unhealthy when ``health.taint_unhealthy`` is set, as the
        publisher writes them.

        Raises:
            SliceValidationError: a device breaks an API rule; the message names it.
        """
        return Published.from_slices(
            [s for spec in self.node.publishable() for s in render_pool(spec)]
        )

    def health(self) -> dict[str, list[DeviceHealth]]:
        """Device health per plugin, asked of the backends now."""
        return self.host.health()


@contextmanager
def run_node(config: Mapping[str, Any], node: SimNode, *, state_dir: Path) -> Iterator[RunningNode]:
    """Start a :class:`drakit.node.daemon.Node` for ``config`` on ``node``; stop it on exit.

    The node serves the real kubelet sockets (registration and DRA service per driver) in a
    short temporary kubelet directory (Unix socket paths are limited to 107 bytes), reads
    claims from a :class:`ClaimStore`, writes CDI specs to ``state_dir/cdi`` and checkpoints
    to ``state_dir/state``. Nothing is published (no cluster) and metrics are off.

    Args:
        config: a drakit configuration, as for :func:`open_host`.
        node: the simulated node.
        state_dir: a directory for the node's files (created if missing).

    Raises:
        ValueError: ``config`` sets a key the kit sets.
        DrakitError: the node could not start (configuration, a backend, a socket).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    kubelet_dir = Path(tempfile.mkdtemp(prefix="dk-", dir=fast_tmp()))
    try:
        (kubelet_dir / "plugins_registry").mkdir()
        cdi_dir = state_dir / "cdi"
        settings = _settings(
            {**config, "metrics": {**dict(config.get("metrics") or {}), "enabled": False}},
            node,
            kubelet_dir=kubelet_dir,
            cdi_dir=cdi_dir,
            state_dir=state_dir / "state",
        )
        claims = ClaimStore()
        drakit_node = Node(
            settings, claims=claims, boot_id="drakit-testing", instance_id="drakit-testing"
        )
        drakit_node.start()
        try:
            sockets = {d: s.registration_socket for d, s in drakit_node.servers.items()}
            yield RunningNode(
                node=drakit_node,
                claims=claims,
                kubelet=KubeletSide(sockets, cdi_dir),
                sim=node,
                kubelet_dir=kubelet_dir,
                cdi_dir=cdi_dir,
                state_dir=state_dir,
            )
        finally:
            drakit_node.stop(grace=1)
    finally:
        shutil.rmtree(kubelet_dir, ignore_errors=True)
