"""The prepare/unprepare pipeline of one DRA driver on a node.

For each claim in a kubelet call (``docs/architecture.md``, "Prepare pipeline"):

1. GET the ResourceClaim (outside the lock, so slow API calls of concurrent kubelet calls overlap;
   on the calling thread when the call has one claim) and check its UID and allocation;
2. take this driver's allocation results; check every device is one this node published;
3. resolve opaque configuration (class entries first, then claim entries, in allocation order;
   later wins) and validate each object through the owning plugin (the webhook uses the same
   hook). Steps 1-3 are :mod:`drakit.prepare.claims`;
4. put ``PrepareStarted`` records in memory (nothing is written yet: a crash before step 7 leaves
   at most the CDI spec, which a restart attributes to its devices, and an unprepare of a claim
   without a record of what was prepared reaches every backend of the driver);
5. route each device to the plugin that discovered it (``drakit_prepare_devices``);
6. write one CDI spec for the claim, atomically;
7. record ``PrepareCompleted`` with what was returned (one durable write for the call), and
   return the CDI IDs per device.
8. when a plugin returned ``network_data``, queue one server-side apply of this driver's
   ``status.devices`` entries (on the writer's own thread, after the reply is built; skipped when
   the claim GET already showed exactly those entries; retried with back-off on conflicts and
   outages; :mod:`drakit.prepare.device_status`). Crash safety: the entries are derived from
   the checkpoint, so a crash before the write is repaired by
   :meth:`DriverState.resume_device_status` at the next start, and an apply that is repeated
   changes nothing.

Every failure is the failing claim's own error string, naming the claim and the field; the other
claims of the call proceed, whatever the input (a malformed UID, deeply nested configuration, a
file-system error: those are reported as what they are and are retryable). Prepare and unprepare
are idempotent, and a crash between any two steps is repaired by the next call (the checkpoint
says how far the claim got). Calls are serialised per driver, after the claim GETs, by a thread
lock and an ``flock`` on ``<state dir>/<driver>/serialize.lock``, so two instances on one node
(a rolling update) never prepare at once.

The checkpoint is read once and kept in memory (read again only when another instance wrote it).
When it was lost or damaged, the claims that still have CDI specs are rebuilt from them
(:mod:`drakit.prepare.recovery`): their
devices are held (an exclusive device is never prepared for another claim; a shared one whose
share is unknown is refused with a retryable error until the recovered claim is unprepared; a
spec whose devices cannot be attributed refuses every prepare of the driver, retryably).
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

from drakit.errors import DrakitError, PermanentError, RetryableError
from drakit.host.inventory import Inventory, InventorySnapshot
from drakit.host.pluginhost import PluginHost
from drakit.models import (
    AllocatedDevice,
    CdiEdits,
    CdiMount,
    ClaimInfo,
    ClaimPrepareResult,
    ClaimRef,
    ClaimUnprepareResult,
    PreparedDevice,
    PreparedDeviceRef,
)
from drakit.prepare.cdi import CdiWriter, device_root_of
from drakit.prepare.checkpoint import Checkpoint, CheckpointStore, ClaimPhase, ClaimRecord
from drakit.prepare.claims import (
    DNS_SUBDOMAIN,
    MAX_CONFIG_DEPTH,
    MAX_OPAQUE_BYTES,
    ClaimError,
    ClaimReader,
    ClaimSource,
    Planned,
    claim_ref_error,
    describe,
    show,
)
from drakit.prepare.device_status import (
    DeviceStatusSink,
    StatusJob,
    StatusWriter,
    entry_key,
    status_entries,
)
from drakit.prepare.faults import crash_point
from drakit.prepare.metadata import SUBDIR as METADATA_SUBDIR
from drakit.prepare.metadata import MetadataDevice, MetadataWriter, container_path, with_mount
from drakit.prepare.recovery import ADMIN_ACCESS_ENV, recover_claims
from drakit.statefiles import ensure_dir, open_private

__all__ = [
    "MAX_CONFIG_DEPTH",
    "MAX_OPAQUE_BYTES",
    "ClaimSource",
    "DriverState",
    "PipelineObserver",
    "claim_ref_error",
]

log = logging.getLogger(__name__)

R = TypeVar("R", ClaimPrepareResult, ClaimUnprepareResult)


class PipelineObserver(Protocol):
    """Receives timings and outcomes (the metrics module implements it)."""

    def observe(self, driver: str, op: str, result: str, seconds: float) -> None:
        """One prepare or unprepare of one claim finished."""
        ...


def _failed_claim(op: str, where: str, uid: str, e: Exception) -> str:
    """Log why ``op`` of one claim failed (a plugin bug with its traceback); its error string.

    A :class:`~drakit.errors.DrakitError` is the claim's own error; anything else is a bug in a
    plugin, which fails its claim, never the whole call.
    """
    if isinstance(e, DrakitError):
        log.warning("%s of %s (uid %s) failed: %s", op, where, uid, e, stacklevel=2)
        return f"{where}: {e}"
    log.error("%s of %s (uid %s) failed in a plugin", op, where, uid, exc_info=e, stacklevel=2)
    return f"{where}: internal error in a plugin: {show(repr(e))}"


_NO_EDITS = CdiEdits()


def _kept(devices: Sequence[PreparedDevice]) -> list[PreparedDevice]:
    """What the checkpoint keeps of a plugin's prepared devices: all but their CDI edits.

    The edits are in the claim's CDI spec, are needed nowhere else (unprepare gets ``state``),
    and are most of a record's size (a GPU's driver files are about 20 mounts): serialised
    into every save of the checkpoint they cost more than the spec itself.
    """
    out = []
    for p in devices:
        e = p.edits
        out.append(
            p.model_copy(update={"edits": _NO_EDITS})
            if e.env or e.device_nodes or e.mounts or e.hooks
            else p
        )
    return out


class DriverState:
    """Implements the kubelet's NodePrepareResources/NodeUnprepareResources for one driver.

    Args:
        driver: the DRA driver name.
        host: the plugin host (config validation, prepare and unprepare hooks).
        claims: where ResourceClaims are read (and, when the source can apply claim status,
            where networkData is written).
        state_dir: drakit's state directory; this driver uses ``<state_dir>/<driver>/`` (0700).
        cdi_dir: the CDI spec directory.
        boot_id: the node's current boot ID.
        on_repair: called when the checkpoint was repaired (see :class:`CheckpointStore`).
        observer: receives per-claim timings.
        get_workers: how many claim GETs run in parallel (calls with several claims).
        inventory: the node's device inventory (which plugin owns which device); each kubelet
            call reads its current snapshot once. ``None``: one of its own, discovered now.
        device_root: the host directory whose ``dev/`` holds the device nodes the CDI specs
            name (``hostPath``); ``None`` or ``/``: the simulated root for simulated hardware,
            else ``/`` (:func:`drakit.prepare.cdi.device_root_of`).
        device_root_mount: where this process sees ``device_root`` (default: there); not
            used for a simulated root, which is read where it is.

    Raises:
        PermanentError: the driver name is not a DNS subdomain, or the state directory is a
            link or not a directory.
    """

    def __init__(
        self,
        driver: str,
        host: PluginHost,
        claims: ClaimSource,
        *,
        state_dir: Path,
        cdi_dir: Path,
        boot_id: str,
        on_repair: Callable[[str, str, int], None] | None = None,
        observer: PipelineObserver | None = None,
        get_workers: int = 8,
        inventory: Inventory | None = None,
        device_root: Path | None = None,
        device_root_mount: Path | None = None,
        device_metadata: bool = False,
        guard: Callable[[str], CdiMount] | None = None,
    ) -> None:
        if len(driver) > 253 or not DNS_SUBDOMAIN.fullmatch(driver):  # noqa: PLR2004
            raise PermanentError(
                f"driver name {show(driver)!r} is not a lower-case DNS subdomain; it names "
                "directories and sockets, so it must be one"
            )
        self.driver = driver
        self.host = host
        if inventory is None:
            inventory = Inventory(host)
            inventory.refresh()
        self.inventory = inventory
        self.claims = claims
        self._reader = ClaimReader(driver, host, claims)
        ensure_dir(state_dir)
        self.dir = ensure_dir(state_dir / driver)
        root = device_root_of(device_root, host.node.sysfs_root)
        self.cdi = CdiWriter(
            cdi_dir,
            driver,
            device_root=root,
            # the mount is of the configured root; a simulated root is seen where it is
            check_root=device_root_mount if root == Path(device_root or "/") else None,
        )
        self.metadata = MetadataWriter((self.dir / METADATA_SUBDIR).absolute(), driver)
        # KEP-5304 files are opt-in, as in the Go helper (EnableDeviceMetadata): they cost a
        # file write with two fsyncs per request; leftovers are swept and removed either way
        self.device_metadata = device_metadata
        self._swept = False
        self.store = CheckpointStore(
            self.dir / "checkpoint.json", driver, boot_id, on_repair, recover=self._recover
        )
        self.observer = observer
        self._lock = threading.Lock()
        self._lock_path = self.dir / "serialize.lock"
        self._lfd: int | None = None
        self._lident: tuple[int, int] = (0, 0)
        self._get_workers = get_workers
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._status = (
            StatusWriter(claims, driver) if isinstance(claims, DeviceStatusSink) else None
        )
        # fail closed through NRI: a mount per CDI device that only drakit's NRI plugin removes
        self.guard = guard
        self.on_change: Callable[[], None] | None = None
        self._reserved_changed = False
        """Called after a prepare or unprepare call that changed what the driver holds."""

    def _workers(self) -> ThreadPoolExecutor:
        """The GET worker pool, started on first use (claim GETs of calls with several)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self._get_workers, thread_name_prefix="claim-get"
                )
            return self._pool

    def close(self) -> None:
        """Stop the GET pool and networkData writer; release the checkpoint's directory handle."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._status is not None:
            self._status.close()
        with self._lock:
            self.store.close()
            if self._lfd is not None:
                os.close(self._lfd)
                self._lfd = None

    @contextmanager
    def _serialized(self) -> Iterator[None]:
        with self._lock:
            fd = self._lock_fd()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock_fd(self) -> int:
        """The lock file, kept open; opened again when the file at its path is another one.

        Called under the thread lock. One ``lstat`` per call instead of open, fstat and close;
        a lock file someone removed or replaced is never locked in vain (the other instance of a
        rolling update locks the file at the path).
        """
        if self._lfd is not None:
            try:
                st = os.lstat(self._lock_path)
            except OSError:
                st = None
            if st is not None and (st.st_dev, st.st_ino) == self._lident:
                return self._lfd
            os.close(self._lfd)
            self._lfd = None
        fd = open_private(self._lock_path)
        st = os.fstat(fd)
        self._lfd, self._lident = fd, (st.st_dev, st.st_ino)
        return fd

    def prepared_claims(self) -> dict[str, ClaimRecord]:
        """The checkpoint's claims (for tests, metrics and the CLI)."""
        with self._serialized():
            return dict(self.store.load().claims)

    # -- recovery ------------------------------------------------------------------------------

    def _recover(self, cp: Checkpoint) -> dict[str, ClaimRecord]:
        """Records for claims that have a CDI spec of this driver but no checkpoint record."""
        snap = self.inventory.current
        return recover_claims(self.cdi, snap.devices_of(self.driver), cp, snap)

    # -- prepare -------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimPrepareResult]:
        """Prepare every claim; one entry per claim UID, errors per claim."""
        start = time.monotonic()
        out, valid = self._checked(claims, "prepare", ClaimPrepareResult, start)
        snap = self.inventory.current  # one discovery round for the whole call
        if len(valid) == 1:  # the common case: no hand-off to another thread
            fetched = [self._reader.fetch(valid[0], snap)]
        elif valid:
            fetched = list(
                self._workers().map(functools.partial(self._reader.fetch, snap=snap), valid)
            )
        else:
            return out
        with self._serialized():
            done = self._prepare_locked(list(zip(valid, fetched, strict=True)), snap)
        self._changed()
        for ref in valid:
            out[ref.uid] = done[ref.uid]
            self._observe("prepare", done[ref.uid].error, start)
        return out

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # a listener's failure never fails the kubelet's call
                log.exception("driver %s: the held-devices listener failed", self.driver)

    def _checked(
        self, claims: Sequence[ClaimRef], op: str, result: type[R], start: float
    ) -> tuple[dict[str, R], list[ClaimRef]]:
        """The kubelet's claim references that are usable, and a result for each that is not."""
        out: dict[str, R] = {}
        valid: list[ClaimRef] = []
        for ref in claims:
            err = claim_ref_error(ref)
            if err:
                out[ref.uid] = result(error=err)
                self._observe(op, err, start)
            else:
                valid.append(ref)
        return out, valid

    def _observe(self, op: str, error: str, start: float) -> None:
        if self.observer is not None:
            self.observer.observe(
                self.driver, op, "error" if error else "success", time.monotonic() - start
            )

    @staticmethod
    def _held(cp: Checkpoint, plugin: str, except_uid: str) -> list[PreparedDevice]:
        """What ``plugin`` prepared for other claims; adminAccess devices hold nothing."""
        out: list[PreparedDevice] = []
        for uid, rec in cp.claims.items():
            if uid != except_uid:
                admin = set(rec.admin_requests)
                out.extend(p for p in rec.prepared.get(plugin, []) if p.request not in admin)
        return out

    def _prepare_locked(
        self, fetched: Sequence[tuple[ClaimRef, Planned | ClaimError]], snap: InventorySnapshot
    ) -> dict[str, ClaimPrepareResult]:
        """Steps 4-7 for every claim of one call, under the driver's lock."""
        out: dict[str, ClaimPrepareResult] = {}
        plans = [p for _, p in fetched if isinstance(p, Planned)]
        for ref, p in fetched:
            if isinstance(p, ClaimError):
                out[ref.uid] = ClaimPrepareResult(error=str(p))
        try:
            cp = self.store.load()
            self._sweep_metadata(cp)
            self._reserved_changed = False
            todo = self._admit(cp, plans, out, snap)
            if not todo:
                if self._reserved_changed:
                    self.store.save(cp)
                return out
        except DrakitError as e:  # the checkpoint cannot be read or written: retryable
            return out | self._failed(plans, e, out)
        completed: list[Planned] = []
        for plan in todo:
            err = self._prepare_devices(cp, plan, snap)
            if err:
                out[plan.ref.uid] = ClaimPrepareResult(error=err)
            else:
                completed.append(plan)
        try:
            self.store.save(cp)  # what was prepared, failed claims included (for unprepare)
        except DrakitError as e:
            return out | self._failed(completed, e, {})
        for plan in completed:
            crash_point("prepare-after-checkpoint")
            rec = cp.claims[plan.ref.uid]
            out[plan.ref.uid] = ClaimPrepareResult(devices=rec.results)
            self._write_device_status(rec, plan.status)
            log.info(
                "prepared claim %s (uid %s): %d devices",
                describe(plan.ref),
                plan.ref.uid,
                len(plan.devices),
            )
        return out

    def _failed(
        self, plans: Sequence[Planned], e: DrakitError, done: dict[str, ClaimPrepareResult]
    ) -> dict[str, ClaimPrepareResult]:
        """The same error for every claim in ``plans`` that has no result in ``done`` yet."""
        return {
            p.ref.uid: ClaimPrepareResult(error=f"{describe(p.ref)}: {e}")
            for p in plans
            if p.ref.uid not in done
        }

    def _admit(
        self,
        cp: Checkpoint,
        plans: Sequence[Planned],
        out: dict[str, ClaimPrepareResult],
        snap: InventorySnapshot,
    ) -> list[Planned]:
        """Step 4 in memory: the claims that need work get ``PrepareStarted`` records."""
        holders = self._holders(cp)
        todo: list[Planned] = []
        for plan in plans:
            ref = plan.ref
            rec = cp.claims.get(ref.uid)
            if (
                rec is not None
                and rec.phase == ClaimPhase.PREPARE_COMPLETED
                and not rec.recovered
                and self.cdi.exists(ref.uid)
            ):
                pods = sorted(set(rec.reserved_for) | set(plan.reserved_for))
                if pods != rec.reserved_for:  # another pod shares the claim: remember it
                    cp.claims[ref.uid] = rec.model_copy(update={"reserved_for": pods})
                    self._reserved_changed = True
                out[ref.uid] = ClaimPrepareResult(devices=rec.results)  # idempotent repeat
                self._write_device_status(rec, plan.status)  # e.g. lost in a crash
                continue
            if rec is not None and rec.phase == ClaimPhase.UNPREPARE_STARTED:  # older versions
                err = self._unprepare_locked(cp, [ref]).get(ref.uid, "")
                if err:  # finish the interrupted unprepare first
                    out[ref.uid] = ClaimPrepareResult(error=err)
                    continue
                for key in holders:  # its devices are free again
                    holders[key] = [h for h in holders[key] if h[0] != ref.uid]
                rec = None
            clash = self._clash(plan, holders, snap)
            if clash:
                out[ref.uid] = ClaimPrepareResult(error=f"{describe(ref)}: {clash}")
                continue
            for d in plan.devices:  # later claims of this call see these as held
                if not d.admin_access:
                    key = (d.pool, d.device)
                    holders.setdefault(key, []).append((ref.uid, describe(ref), False))
            cp.claims[ref.uid] = ClaimRecord(
                namespace=ref.namespace,
                name=ref.name,
                uid=ref.uid,
                phase=ClaimPhase.PREPARE_STARTED,
                admin_requests=sorted({d.request for d in plan.devices if d.admin_access}),
                # every owning plugin is on the record before it is called: a composite's
                # members write it (each member durably, with what it returned), and what an
                # earlier record held (a reboot's demoted claim) stays on it
                prepared={p: [] for p in plan.owners} | (rec.prepared if rec is not None else {}),
                reserved_for=sorted(set(plan.reserved_for) | set(rec.reserved_for if rec else ())),
            )
            todo.append(plan)
        return todo

    def _prepare_devices(self, cp: Checkpoint, plan: Planned, snap: InventorySnapshot) -> str:
        """Steps 5-6 for one claim; updates its record in ``cp``; returns its error or ""."""
        ref = plan.ref
        where = describe(ref)
        rec = cp.claims[ref.uid]
        try:
            prepared: dict[str, list[PreparedDevice]] = {}
            for plugin, devs in plan.owners.items():
                claim = ClaimInfo(
                    namespace=ref.namespace, name=ref.name, uid=ref.uid, devices=tuple(devs)
                )
                members = _MemberSession(self, cp, ref.uid, where)
                got = self.host.prepare(
                    plugin,
                    claim,
                    self._held(cp, plugin, ref.uid),
                    members,
                    frozenset(cp.claims.keys() - {ref.uid}),
                )
                self._check_prepared(where, plugin, devs, got)
                prepared[plugin] = got
                rec = cp.claims[ref.uid]  # with what members prepared for this plugin
                rec = rec.model_copy(update={"prepared": {**rec.prepared, plugin: _kept(got)}})
                cp.claims[ref.uid] = rec
            crash_point("prepare-after-plugin")
            edits = self._device_edits(plan, snap, prepared)
            crash_point("prepare-after-metadata")
            spec = self.cdi.build(ref.uid, edits)
            name = self.cdi.write(ref.uid, spec)
            crash_point("prepare-after-cdi")
        except Exception as e:  # noqa: BLE001 - logged by _failed_claim; a plugin bug fails its claim
            return _failed_claim("prepare", where, ref.uid, e)
        results = [
            PreparedDeviceRef(
                requests=[d.request],
                pool=d.pool,
                device=d.device,
                cdi_device_ids=[self.cdi.device_id(ref.uid, self._cdi_device(d))],
                share_id=d.share_id,
            )
            for d in plan.devices
        ]
        cp.claims[ref.uid] = rec.model_copy(
            update={"cdi_spec": name, "results": results, "phase": ClaimPhase.PREPARE_COMPLETED}
        )
        return ""

    def _device_edits(
        self,
        plan: Planned,
        snap: InventorySnapshot,
        prepared: Mapping[str, Sequence[PreparedDevice]],
    ) -> list[tuple[str, CdiEdits]]:
        """Each device's CDI edits (with ``device_metadata``: its metadata file, mounted).

        The attributes are the device's as this node publishes them (the call's snapshot),
        the network data what its plugin returned.
        """
        ref = plan.ref
        paths = self._write_metadata(plan, snap, prepared) if self.device_metadata else {}
        out: list[tuple[str, CdiEdits]] = []
        for plugin, devs in plan.owners.items():
            for d, p in zip(devs, self._ordered(list(prepared[plugin]), devs), strict=True):
                edits = p.edits
                if d.request in paths:
                    inside = container_path(self.driver, ref.name, plan.pod_claim_name, d.request)
                    edits = with_mount(edits, str(paths[d.request]), inside)
                if d.admin_access:  # the container learns it; a rebuilt record knows it
                    cdi = edits.to_cdi()
                    cdi["env"] = [*cdi.get("env", []), ADMIN_ACCESS_ENV]
                    edits = CdiEdits.model_validate(cdi)
                name = self._cdi_device(d)
                if self.guard is not None:
                    guard = self.guard(self.cdi.device_name(ref.uid, name))
                    edits = edits.model_copy(update={"mounts": (*edits.mounts, guard)})
                out.append((name, edits))
        return out

    def _write_metadata(
        self,
        plan: Planned,
        snap: InventorySnapshot,
        prepared: Mapping[str, Sequence[PreparedDevice]],
    ) -> dict[str, Path]:
        """Write the claim's device metadata files; each request -> its file."""
        ref = plan.ref
        got = {(p.request, p.pool, p.device): p for devs in prepared.values() for p in devs}
        by_request: dict[str, list[MetadataDevice]] = {}
        for d in plan.devices:
            p = got[(d.request, d.pool, d.device)]
            dev = snap.device(d.key)
            attributes = (
                {k: dev.attributes[k].to_api() for k in sorted(dev.attributes)} if dev else {}
            )
            by_request.setdefault(d.request, []).append(
                MetadataDevice(
                    driver=self.driver,
                    pool=d.pool,
                    name=d.device,
                    attributes=attributes,
                    network_data=p.network_data.to_api() if p.network_data else None,
                )
            )
        return self.metadata.write(
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
            pod_claim_name=plan.pod_claim_name,
            requests=by_request,
        )

    def _sweep_metadata(self, cp: Checkpoint) -> None:
        """Once per process, under the lock: drop device metadata no claim owns (a crash's)."""
        if self._swept:
            return
        gone = self.metadata.sweep(set(cp.claims) | self.cdi.claim_uids())
        if gone:
            log.info("removed the device metadata of %d claims nothing holds: %s", len(gone), gone)
        self._swept = True

    def _save(self, cp: Checkpoint) -> None:
        self.store.save(cp)

    @staticmethod
    def _holders(cp: Checkpoint) -> dict[tuple[str, str], list[tuple[str, str, bool]]]:
        """(pool, device) -> [(uid, "claim ns/name", recovered)] for every record's devices.

        A device allocated with adminAccess is not held: the scheduler gives it to an
        adminAccess claim whoever holds it, and other claims may have it while it is prepared so.
        """
        out: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
        for uid, rec in cp.claims.items():
            who = f"{rec.namespace}/{rec.name}" if not rec.recovered else f"with UID {uid}"
            admin = set(rec.admin_requests)
            keys = {
                (r.pool, r.device)
                for r in rec.results
                if not (r.requests and admin.issuperset(r.requests))
            }
            keys |= {
                (p.pool, p.device)
                for devs in rec.prepared.values()
                for p in devs
                if p.request not in admin
            }
            if rec.recovered and not rec.results:
                keys.add(("", ""))  # holds something unknown
            for key in keys:
                out.setdefault(key, []).append((uid, who, rec.recovered))
        return out

    def _clash(
        self,
        plan: Planned,
        holders: dict[tuple[str, str], list[tuple[str, str, bool]]],
        snap: InventorySnapshot,
    ) -> str:
        """The last line of defence against double use: a device another claim may hold."""
        me = plan.ref.uid
        unknown = [uid for uid, _, _ in holders.get(("", ""), []) if uid != me]
        if unknown and plan.devices:
            return (
                "the checkpoint of this driver was lost and the CDI specs of claims with UIDs "
                f"{', '.join(sorted(unknown)[:5])} could not be attributed to devices, so any "
                "device may still be in use; prepares are refused until the kubelet unprepares "
                "those claims (retryable)"
            )
        for d in plan.devices:
            if d.admin_access:  # monitoring a device others hold is what adminAccess is for
                continue
            others = [h for h in holders.get((d.pool, d.device), []) if h[0] != me]
            if not others:
                continue
            dev = snap.device(d.key)
            shared = dev is not None and bool(dev.allow_multiple_allocations)
            _, who, recovered = others[0]
            if not shared:
                lost = " (recovered from its CDI spec after the checkpoint was lost)"
                return (
                    f"request {d.request!r}: device {d.device!r} is still prepared for claim "
                    f"{who}{lost if recovered else ''} and cannot be shared (no "
                    "allowMultipleAllocations); the allocation is stale, the kubelet will retry "
                    "after that claim is released"
                )
            recovered_holders = [w for _, w, r in others if r]
            if recovered_holders:
                return (
                    f"request {d.request!r}: device {d.device!r} is shared with claim "
                    f"{recovered_holders[0]}, whose checkpoint record was lost (rebuilt from its "
                    "CDI spec, without its share of the device); the device is not prepared "
                    "again until that claim is unprepared (retryable)"
                )
        return ""

    def _write_device_status(self, rec: ClaimRecord, seen: frozenset[str] | None) -> bool:
        """Queue the apply of ``rec``'s networkData unless the claim already shows exactly it.

        ``seen``: this driver's entries in the claim as just read (``None``: unknown). Returns
        whether a write was queued.
        """
        if self._status is None:
            return False
        entries = status_entries(self.driver, rec)
        if not entries or (seen is not None and seen == {entry_key(e) for e in entries}):
            return False
        self._status.submit(
            StatusJob(namespace=rec.namespace, name=rec.name, uid=rec.uid, devices=tuple(entries))
        )
        return True

    def record_network_data(
        self, claim_uid: str, plugin: str, devices: Sequence[PreparedDevice]
    ) -> bool:
        """Record ``plugin``'s new ``network_data`` for a claim's devices and write it to the claim.

        Called by the NRI plugin after ``drakit_pod_sandbox_start`` (the netdev's name inside
        the pod). Only ``network_data`` of devices the record has is taken. Returns whether the
        record changed.
        """
        new = {(d.request, d.pool, d.device): d.network_data for d in devices}
        with self._serialized():
            cp = self.store.load()
            rec = cp.claims.get(claim_uid)
            if rec is None or plugin not in rec.prepared:
                return False
            mine = [
                p.model_copy(update={"network_data": new[(p.request, p.pool, p.device)]})
                if (p.request, p.pool, p.device) in new
                else p
                for p in rec.prepared[plugin]
            ]
            if mine == rec.prepared[plugin]:
                return False
            rec = rec.model_copy(update={"prepared": {**rec.prepared, plugin: mine}})
            cp.claims[claim_uid] = rec
            self.store.save(cp)
        if rec.phase == ClaimPhase.PREPARE_COMPLETED and rec.name and rec.namespace:
            self._write_device_status(rec, None)
        return True

    def resume_device_status(self) -> int:
        """Apply the networkData of every prepared claim in the checkpoint (at start-up).

        A crash between a prepare's reply and its networkData write leaves the claim without
        it; this writes it again (server-side apply of the same entries changes nothing when it
        is there already). Returns how many claims were queued.
        """
        if self._status is None:
            return 0
        with self._serialized():
            claims = list(self.store.load().claims.values())
        return sum(
            self._write_device_status(rec, None)
            for rec in claims
            if rec.phase == ClaimPhase.PREPARE_COMPLETED and rec.name and rec.namespace
        )

    @staticmethod
    def _cdi_device(d: AllocatedDevice) -> str:
        return f"{d.device}-{d.share_id}" if d.share_id else d.device

    @staticmethod
    def _ordered(got: list[PreparedDevice], devs: list[AllocatedDevice]) -> list[PreparedDevice]:
        by_key = {(p.request, p.pool, p.device): p for p in got}
        return [by_key[(d.request, d.pool, d.device)] for d in devs]

    @staticmethod
    def _check_prepared(
        where: str, plugin: str, devs: list[AllocatedDevice], got: list[PreparedDevice]
    ) -> None:
        want = sorted((d.request, d.pool, d.device) for d in devs)
        have = sorted((p.request, p.pool, p.device) for p in got)
        if want != have:
            raise PermanentError(
                f"plugin {plugin!r} prepared {have} but was asked for {want}; "
                "a plugin must return exactly one PreparedDevice per device"
            )

    # -- unprepare -----------------------------------------------------------------------------

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimUnprepareResult]:
        """Unprepare every claim (unknown claims succeed); one entry per claim UID."""
        start = time.monotonic()
        out, valid = self._checked(claims, "unprepare", ClaimUnprepareResult, start)
        if not valid:
            return out
        if self._status is not None:
            for ref in valid:
                self._status.cancel(ref.uid)
        with self._serialized():
            try:
                cp = self.store.load()
                self._sweep_metadata(cp)
            except DrakitError as e:
                errors = {r.uid: f"{describe(r)}: {e}" for r in valid}
            else:
                errors = self._unprepare_locked(cp, valid)
        self._changed()
        for ref in valid:
            out[ref.uid] = ClaimUnprepareResult(error=errors.get(ref.uid, ""))
            self._observe("unprepare", out[ref.uid].error, start)
        return out

    def _unprepare_locked(self, cp: Checkpoint, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare ``refs`` (one durable write, when all is undone); errors by UID.

        The CDI spec goes first: a completed record without its spec is never served from the
        checkpoint again (:meth:`_admit` prepares it afresh through the plugins, whose prepare
        is idempotent), so a crash anywhere in an unprepare needs no record of its own, and
        the kubelet's next unprepare simply undoes again (unprepare hooks are tolerant).
        """
        errors: dict[str, str] = {}
        todo: list[ClaimRef] = []
        for ref in refs:
            if ref.uid in cp.claims:
                todo.append(ref)
                continue
            err = self._undo(None, ref)  # cut short before its record, or a lost checkpoint
            if err:
                errors[ref.uid] = err
        if not todo:
            return errors
        done: list[ClaimRef] = []
        for ref in todo:
            err = self._undo(cp.claims[ref.uid], ref)
            errors.update({ref.uid: err} if err else {})
            done += [] if err else [ref]
        if not done:
            return errors
        for ref in done:
            del cp.claims[ref.uid]
        try:
            self.store.save(cp)
        except DrakitError as e:
            return errors | {r.uid: f"{describe(r)}: {e}" for r in done}
        for ref in done:
            crash_point("unprepare-after-checkpoint")
            log.info("unprepared claim %s (uid %s)", describe(ref), ref.uid)
        return errors

    def _undo(self, rec: ClaimRecord | None, ref: ClaimRef) -> str:
        """The CDI spec and the plugins' unprepare hooks of one claim; its error or "".

        The plugins are those on the claim's record, with what each returned. Without a record
        of them (``rec`` is ``None``: no record at all, because a crash cut the prepare short
        before its one write or the checkpoint was lost; or a record rebuilt from the CDI spec)
        every backend of the driver is asked with ``prepared`` empty, and undoes by claim UID
        whatever it did (unprepare hooks are tolerant of claims they never saw).
        """
        where = describe(ref)
        if rec is not None and rec.prepared:
            owners: Mapping[str, Sequence[PreparedDevice]] = rec.prepared
        else:
            owners = {p: [] for p in self.host.plugins_for_driver(self.driver)}
        try:
            self.cdi.remove(ref.uid)
            crash_point("unprepare-after-cdi")
            self.metadata.remove(ref.uid)  # after the spec: no container can mount them now
            for plugin, prepared in owners.items():
                if plugin in self.host.backends:
                    self.host.unprepare(plugin, ref.uid, prepared)
                else:
                    log.warning(
                        "%s: plugin %r is no longer enabled; nothing to undo", where, plugin
                    )
            crash_point("unprepare-after-plugin")
        except Exception as e:  # noqa: BLE001 - logged by _failed_claim; a plugin bug fails its claim
            return _failed_claim("unprepare", where, ref.uid, e)
        return ""


class _MemberSession:
    """``PluginContext.members`` during one plugin's prepare of one claim (composites).

    A member plugin is put on the claim's record before it is called and what it returns right
    after, each durably, under the member's own name: an unprepare, also after a kill between
    two members, reaches every member that was asked, with what it had returned (or nothing),
    and ``held`` shows every member what it holds for other claims, pairs included.
    """

    def __init__(self, state: DriverState, cp: Checkpoint, uid: str, where: str) -> None:
        self.state, self.cp, self.uid, self.where = state, cp, uid, where

    def _record(self, plugin: str, devices: list[PreparedDevice]) -> None:
        rec = self.cp.claims[self.uid]
        self.cp.claims[self.uid] = rec.model_copy(
            update={"prepared": {**rec.prepared, plugin: _kept(devices)}}
        )
        self.state._save(self.cp)

    def prepare(self, plugin: str, claim: ClaimInfo) -> list[PreparedDevice]:
        lost = sorted(
            uid
            for uid, rec in self.cp.claims.items()
            if rec.recovered
            and uid != self.uid
            and {(r.pool, r.device) for r in rec.results}
            & {(d.pool, d.device) for d in claim.devices}
        )
        if lost:  # its share of the member is unknown (its record went with the checkpoint)
            raise RetryableError(
                f"member devices {', '.join(sorted({d.device for d in claim.devices}))} of "
                f"plugin {plugin!r} are held by claims with UIDs {', '.join(lost[:5])}, rebuilt "
                f"from their CDI specs after the checkpoint {self.state.store.path} was lost; "
                "their share is unknown, so the member is not prepared again until those claims "
                "are unprepared (retryable)"
            )
        before = list(self.cp.claims[self.uid].prepared.get(plugin, []))
        if plugin not in self.cp.claims[self.uid].prepared:
            self._record(plugin, [])
        got = self.state.host.prepare(
            plugin,
            claim,
            DriverState._held(self.cp, plugin, self.uid),
            held_claims=frozenset(self.cp.claims.keys() - {self.uid}),
        )
        DriverState._check_prepared(self.where, plugin, list(claim.devices), got)
        keys = {(p.request, p.pool, p.device) for p in got}
        self._record(plugin, [p for p in before if (p.request, p.pool, p.device) not in keys] + got)
        crash_point("prepare-after-member")
        return got

    def unprepare(self, plugin: str, claim_uid: str, prepared: Sequence[PreparedDevice]) -> None:
        if claim_uid != self.uid:
            raise PermanentError(f"members of claim {self.uid} cannot unprepare claim {claim_uid}")
        self.state.host.unprepare(plugin, claim_uid, prepared)
        keys = {(p.request, p.pool, p.device) for p in prepared}
        left = [
            p
            for p in self.cp.claims[self.uid].prepared.get(plugin, [])
            if (p.request, p.pool, p.device) not in keys
        ]
        self._record(plugin, left)
