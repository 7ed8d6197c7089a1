"""The hook contract between drakit's core and its plugins.

This module is the whole contract: every hook a backend or strategy may implement is declared
here, once, with an empty body and a docstring that says when it is called, what each
parameter means, what the return value means, the call mode, idempotency and threading.
``docs/hooks.md`` has one section per hook; a test fails when a hook is missing there.

Call modes:

* **collect**: every implementation is called; core gathers the non-``None`` results.
* **firstresult**: implementations are called until one returns non-``None``.
* **routed**: core calls only the plugin that owns the device or configuration in question
  (the plugin that discovered the device), never the others.

Hooks are synchronous. Core calls them from worker threads (one per in-flight kubelet call),
so a hook that keeps state must guard it. Always implement hooks with
``@drakit.hookimpl``; an implementation may accept any subset of the documented parameters.

Lifecycle, in order:

1. ``drakit_discover_devices`` (collect), once per discovery round;
2. ``drakit_enrich_devices`` (collect) over everybody's devices;
3. ``drakit_compose_devices`` (collect) for devices built from other devices;
4. ``drakit_publish_order`` (firstresult, by strategy) before rendering ResourceSlices;
5. per claim: ``drakit_parse_config`` (routed), ``drakit_prepare_devices`` (routed),
   and later ``drakit_unprepare_devices`` (routed);
6. ``drakit_device_health`` (collect), polled;
7. ``drakit_shape_request`` (firstresult, by strategy), from the admission webhook and CLI;
8. ``drakit_device_classes`` (routed), from ``drakit deviceclasses``;
9. ``drakit_node_labels`` (collect), after each discovery round of ``drakit node``;
10. with NRI enabled (``nri.enabled``): ``drakit_pod_sandbox_start`` (routed) when a pod's
    sandbox starts, ``drakit_container_resources`` (routed) when a container is created and
    whenever held devices change, ``drakit_pod_sandbox_stop`` (routed) when the sandbox stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import pluggy
from pydantic import BaseModel

from drakit.deviceclasses import DeviceClassSpec
from drakit.models import (
    ClaimInfo,
    ContainerResources,
    ContainerView,
    Device,
    DeviceHealth,
    DeviceInventory,
    DeviceKey,
    NodeInfo,
    PodSandboxView,
    PreparedDevice,
)
from drakit.strategy_models import SelectionRequest, SelectionResult, ShapedClaim, SimpleRequest

PROJECT = "drakit"

API_VERSION = "1.2"
"""The version of this hook contract (``major.minor``), promised in ``docs/compatibility.md``.

A minor version adds hooks or optional parameters; a major version removes or changes one. A
plugin class may declare the versions it works with as ``hook_api = ">=1.0,<2"`` (a
``packaging`` specifier set); the plugin host refuses to load it when this version is outside.
"""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["API_VERSION", "PROJECT", "hookimpl", "hookspec"]

# ---------------------------------------------------------------------------------------------
# discovery hooks
# ---------------------------------------------------------------------------------------------


@hookspec
def drakit_discover_devices(node: NodeInfo) -> DeviceInventory | None:
    """Report the devices this plugin manages on the node.

    Called at start-up and on every re-discovery interval (``discovery.interval``), from the
    publisher's thread. Read hardware through ``node.sysfs_root`` (or the vendor library behind
    your plugin's ``discovery`` seam), never through absolute paths, so simulated profiles and
    real nodes take the same code path.

    Args:
        node: the node's name, the sysfs root to read, and the Node's labels as read for this
            round (``NodeInfo.labels``; empty without a cluster).

    Returns:
        A :class:`~drakit.models.DeviceInventory` with this plugin's devices and any counter
        sets they consume from, or ``None`` if the plugin has nothing on this node. Device names
        must be unique within their pool (the node's pool unless ``Device.pool`` is set).

    Call mode: collect. Idempotent: it must describe the hardware, not change it. A plugin that
    raises fails the discovery round (the previous devices stay published) and is reported in
    ``drakit_plugin_errors_total``.
    """


@hookspec
def drakit_enrich_devices(
    node: NodeInfo, devices: Mapping[DeviceKey, Device]
) -> Mapping[DeviceKey, Mapping[str, Any]] | None:
    """Add attributes to devices, including other plugins' devices.

    Called after every discovery round with all devices discovered so far (read-only). Typical
    use: a topology plugin adds the standard ``resource.kubernetes.io/pcieRoot`` and
    ``resource.kubernetes.io/numaNode`` attributes to every PCI device it can place.

    Args:
        node: the node.
        devices: every discovered device by key (driver, pool, device).

    Returns:
        ``{device_key: {attribute_name: value}}`` with values as plain ``int``/``bool``/``str``
        or :class:`~drakit.models.DeviceAttribute`, or ``None``. Two plugins setting the same
        attribute on the same device to different values is an error naming both plugins; an
        enrichment may not overwrite an attribute the owner set.

    Call mode: collect. Must be pure (no side effects); it runs on every round.
    """


@hookspec
def drakit_compose_devices(
    node: NodeInfo, devices: Mapping[DeviceKey, Device], owners: Mapping[DeviceKey, str]
) -> DeviceInventory | None:
    """Contribute devices composed of other plugins' devices (e.g. GPU-NIC pairs).

    Called after enrichment with every discovered and enriched device, and the plugin that
    discovered each (``owners``: device -> plugin name), so a composite tells its members
    apart even when they publish under one driver. A composite plugin reads member devices
    only through these arguments; it never imports another plugin. A composed device that
    must never be allocated together with a member consumes the member's counter sets
    (KEP-4815), which works only in one pool of one driver (``docs/composite.md``).

    Returns:
        The composed devices (and their counter sets), owned by the composing plugin, or
        ``None``.

    Call mode: collect. Pure; runs on every discovery round.
    """


# ---------------------------------------------------------------------------------------------
# claim hooks (node side)
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drakit_parse_config(
    api_version: str, kind: str, parameters: Mapping[str, Any]
) -> BaseModel | None:
    """Validate one opaque configuration object and return it as the plugin's model.

    Called by the prepare pipeline for each opaque config entry whose ``driver`` is this
    plugin's driver, and by the admission webhook for claims and classes, so the node and the
    webhook accept exactly the same objects.

    Args:
        api_version: the object's ``apiVersion`` (e.g. ``cpu.drakit.io/v1alpha1``).
        kind: the object's ``kind`` (e.g. ``CpuConfig``).
        parameters: the whole JSON object.

    Returns:
        A pydantic model if this plugin owns ``(api_version, kind)``; ``None`` otherwise.

    Raises:
        drakit.errors.ConfigInvalid: the plugin owns the kind but the object is invalid; each
            error names the field (``policy``) and the fix.

    Call mode: routed (only plugins sharing the config's driver name are asked) and
    firstresult. Pure and thread-safe.
    """


@hookspec(firstresult=True)
def drakit_prepare_devices(
    claim: ClaimInfo, held: Sequence[PreparedDevice], held_claims: AbstractSet[str]
) -> Sequence[PreparedDevice] | None:
    """Prepare this plugin's devices of an allocated claim.

    Called by the prepare pipeline after the claim was fetched and its UID checked, once per
    claim and owning plugin, with only the devices this plugin discovered
    (``claim.devices``). Each device carries its validated opaque configs
    (``AllocatedDevice.config``, class first then claim; the last one wins where they overlap).

    Args:
        claim: the claim, with only this plugin's devices.
        held: what this plugin prepared for every *other* claim still prepared on the node
            (from the checkpoint), so it never hands out a resource another claim holds (e.g.
            exclusive CPUs). Calls for one driver are serialised, so this view is consistent.
        held_claims: the UIDs of every *other* claim the driver's checkpoint holds, including
            claims rebuilt from their CDI specs after the checkpoint was damaged, whose
            ``held`` entries are unknown (since hook API 1.1). A backend that keeps its own
            state file never treats what it recorded for one of these claims as stale.

    Returns:
        One :class:`~drakit.models.PreparedDevice` per device, with the CDI container edits to
        apply and private ``state`` that core checkpoints and hands back on unprepare.

    Raises:
        drakit.errors.PermanentError / RetryableError: this claim fails with that message;
            other claims in the same kubelet call are unaffected.

    Call mode: routed to the owning plugin. Idempotent: core may call it again for the same
    claim after a crash or a kubelet retry; return the same result and repeat no side effect.
    Threading: calls for one driver are serialised (per process and, by a file lock, across
    the two instances of a rolling update); different drivers run concurrently. The driver's
    lock is taken after the claim GETs of the kubelet call (those of concurrent calls overlap)
    and held from reading the checkpoint to writing it, so ``held`` cannot change under the
    hook. The same holds for ``drakit_unprepare_devices``.
    """


@hookspec(firstresult=True)
def drakit_unprepare_devices(claim_uid: str, prepared: Sequence[PreparedDevice]) -> bool | None:
    """Undo what ``drakit_prepare_devices`` did for a claim.

    Args:
        claim_uid: the claim's UID (the claim object may no longer exist).
        prepared: what prepare returned for this plugin, from the checkpoint, without the
            CDI edits (``edits`` is empty: they live in the claim's CDI spec); empty
            when core has no record of it (a crash cut the prepare short before the checkpoint
            was written, or the checkpoint was lost): then every plugin of the driver is asked,
            and a plugin with side effects of its own undoes them by ``claim_uid``.

    Returns:
        ``True`` (or ``None``) when done.

    Call mode: routed to the owning plugin (to every plugin of the driver when the claim's
    record does not name them). Idempotent and tolerant: undoing something already undone, or
    a claim this plugin never prepared, is not an error.
    """


@hookspec
def drakit_device_health(node: NodeInfo) -> Sequence[DeviceHealth] | None:
    """Report the health of this plugin's devices.

    Polled by the health monitor every ``health.interval`` seconds. Devices not reported keep
    their last state; the kubelet marks devices it has not heard of for 30 s as Unknown, which
    core prevents by resending the full list.
    A composed device (``drakit_compose_devices``) needs no report of its own: core reports it
    Unhealthy (and taints it, with ``health.taint_unhealthy``) while a member, another plugin's
    device whose counter set it consumes, is Unhealthy.

    Call mode: collect. Must be quick and side-effect free.
    """


# ---------------------------------------------------------------------------------------------
# allocation strategy hooks
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drakit_publish_order(strategy: str, devices: Sequence[Device]) -> Sequence[Device] | None:
    """Order (and optionally group into pools) devices before they are rendered into slices.

    The scheduler tries devices in slice order, so publishing NUMA-ordered devices makes its
    first fit pack (strategy ``packed``) or, interleaved, spread (``distributed``).

    Args:
        strategy: the configured publishing strategy name.
        devices: one plugin's devices, in discovery order.

    Returns:
        The same devices in the new order (a permutation; core checks), or ``None`` when this
        implementation does not handle ``strategy``.

    Call mode: firstresult. Pure.
    """


@hookspec(firstresult=True)
def drakit_shape_request(strategy: str, request: SimpleRequest) -> ShapedClaim | None:
    """Turn a simple request ("4 GPU-NIC pairs", "20 CPUs") into DRA requests and constraints.

    Used by the admission webhook and ``drakit shape``. ``packed`` and ``numa-preferred``
    answer with a ``firstAvailable`` list whose first choice is constrained with
    ``matchAttribute`` and whose last is not, ``distributed`` likewise with
    ``distinctAttribute``, so a pod never stays Pending only because no single NUMA node has
    room; a hard constraint appears only when ``request.required`` is set.

    Returns:
        A :class:`~drakit.strategy_models.ShapedClaim`, or ``None`` when this implementation
        does not handle ``strategy``.

    Call mode: firstresult. Pure.
    """


@hookspec(firstresult=True)
def drakit_select_resources(strategy: str, request: SelectionRequest) -> SelectionResult | None:
    """Choose concrete resources inside an allocated device at prepare time.

    Example: which CPUs of a NUMA-group device a claim for 20 CPUs gets. Backends call this
    through the context's ``select`` helper from their prepare hook, so contributors can add
    strategies without touching the backend.

    Returns:
        The chosen unit ids, or ``None`` when this implementation does not handle
        ``strategy`` for ``request.kind``.

    Raises:
        drakit.errors.PermanentError: the request cannot be satisfied (e.g. full physical cores
            were asked for and too few are free).

    Call mode: firstresult. Pure; called concurrently for different claims.
    """


# ---------------------------------------------------------------------------------------------
# cluster objects
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drakit_device_classes(driver: str) -> Sequence[DeviceClassSpec] | None:
    """The DeviceClasses this plugin's devices are claimed through.

    Called by ``drakit deviceclasses`` (and so by the Helm chart, which installs its output),
    with no node: answer from the settings alone, never from hardware. Without an
    implementation (or when it returns ``None``) the plugin gets one class named after it
    (``nvidia_gpu`` -> ``nvidia-gpu``) selecting all its devices.

    Args:
        driver: the DRA driver name this plugin publishes under (configurable, so never
            hard-code it in a selector: core adds ``device.driver == "<driver>"`` first to
            every class itself).

    Returns:
        :class:`~drakit.deviceclasses.DeviceClassSpec` objects (name, extra CEL
        ``selectors``, a default ``extended_resource_name``, a description), or ``None`` for
        the default class. ``device_classes.<name>.extended_resource_name`` in the
        configuration overrides a class's extended resource.

    Call mode: routed (each backend is asked alone, for its own driver) and firstresult.
    Pure.
    """


@hookspec
def drakit_node_labels(
    node: NodeInfo, devices: Mapping[DeviceKey, Device]
) -> Mapping[str, str] | None:
    """Node labels that describe where this node sits in the cluster's fabric (since 1.2).

    Called after every discovery round of ``drakit node`` with the devices this plugin
    discovered (not the others'). Core merges every backend's answer and keeps the Node's
    labels under ``topology.drakit.io/`` equal to the result: it adds and changes what the
    backends return, and removes every other label under that prefix (drakit owns the
    prefix; no other label of the Node is touched). A topology-aware scheduler reads them:
    kube-scheduler's PodGroup topology constraint and Kueue's ``Topology`` levels take a node
    label key (``docs/multi-node.md``).

    Args:
        node: the node (``node.labels``: the Node's labels as read before this round).
        devices: this plugin's devices of this round, by key.

    Returns:
        ``{label key: value}`` with keys under ``topology.drakit.io/`` and values that are
        valid label values, or ``None`` for none. A key outside the prefix or an invalid value
        is left out with a warning naming the plugin; two backends giving one key different
        values leaves that key out (a warning names both).

    Call mode: collect, each backend asked alone. Pure: core writes the labels.
    """


# ---------------------------------------------------------------------------------------------
# enforcement hooks (the container runtime, through NRI; since hook API 1.2)
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def drakit_container_resources(
    container: ContainerView, devices: Sequence[PreparedDevice], held: Sequence[PreparedDevice]
) -> ContainerResources | None:
    """Say what a container's cpuset (CPUs, memory nodes) must be.

    Called by drakit's NRI plugin (``nri.enabled``) when the runtime creates a container, for
    every container at NRI's Synchronize, and again for every running container whenever a
    prepare or unprepare of the driver changes ``held``; core sends the runtime an update for
    each container whose answer changed. Every plugin of the driver is asked about every
    container, so a plugin can also place containers that use none of its devices.

    Args:
        container: the container as the runtime reports it (its pod, its CDI devices).
        devices: this plugin's prepared devices that the container uses, found from the
            container's CDI device names, which drakit chose at prepare. A claim shared by
            several pods or containers gives each of them its devices. Empty when the container
            uses none of this plugin's devices.
        held: every device this plugin has prepared for any claim on the node (from the
            checkpoint), ``devices`` included.

    Returns:
        A :class:`~drakit.models.ContainerResources` (``None`` in a field: no opinion), or
        ``None`` for no opinion at all. The CPU backend answers the claim's CPUs for a
        container with devices and the shared pool (online CPUs minus those held exclusively)
        for one without.

    Raises:
        drakit.errors.PermanentError / RetryableError: at container creation, the runtime
            fails the creation with the message (the kubelet retries); at a later update, the
            error is logged and the container keeps its cpuset.

    Call mode: routed to each plugin of the driver on its own (core merges their answers),
    and firstresult. Pure: it computes, it changes nothing; calls for one driver are
    serialised with prepare and unprepare, so ``held`` cannot change under the hook.
    """


@hookspec(firstresult=True)
def drakit_pod_sandbox_start(
    sandbox: PodSandboxView, claim_uid: str, devices: Sequence[PreparedDevice]
) -> Sequence[PreparedDevice] | None:
    """Configure what belongs inside a pod's sandbox when it starts (e.g. move a netdev in).

    Called by drakit's NRI plugin at RunPodSandbox, once per claim of this plugin that the pod
    uses (core maps the pod's UID to claims through the claim's ``status.reservedFor``,
    recorded at prepare).

    Args:
        sandbox: the pod sandbox, with the path of its network namespace.
        claim_uid: the claim's UID.
        devices: this plugin's prepared devices of the claim (from the checkpoint).

    Returns:
        The devices with updated ``network_data`` (the in-pod interface name, addresses),
        which core writes to the claim's ``status.devices[].networkData``; or ``None`` when
        nothing changed.

    Raises:
        drakit.errors.PermanentError / RetryableError: the sandbox creation fails with the
            message; the kubelet retries it.

    Call mode: routed to the owning plugin, and firstresult. Idempotent: the runtime may
    send the same sandbox again (a retry, a restart of drakit); repeat no side effect.
    """


@hookspec(firstresult=True)
def drakit_pod_sandbox_stop(
    sandbox: PodSandboxView, claim_uid: str, devices: Sequence[PreparedDevice]
) -> bool | None:
    """Undo what ``drakit_pod_sandbox_start`` did for a claim (move the netdev back).

    Called by drakit's NRI plugin at StopPodSandbox and RemovePodSandbox, and at Synchronize
    for claims whose sandbox no longer exists.

    Args:
        sandbox: the pod sandbox (its network namespace may already be gone).
        claim_uid: the claim's UID.
        devices: this plugin's prepared devices of the claim (from the checkpoint).

    Returns:
        ``True`` (or ``None``) when done.

    Call mode: routed to the owning plugin, and firstresult. Idempotent and tolerant: a
    netdev already back in the host namespace, or a namespace that vanished, is not an error.
    """
