"""The prepare/unprepare pipeline of one DRA driver on a node.

For each claim in a kubelet call (``docs/architecture.md``, "Prepare pipeline"):

1. GET the ResourceClaim (outside the lock, so slow API calls of concurrent kubelet calls overlap;
   on the calling thread when the call has one claim) and check its UID and allocation;
2. take this driver's allocation results; check every device is one this node published;
3. resolve opaque configuration (class entries first, then claim entries, in allocation order;
   later wins) and validate each object through the owning plugin (the webhook uses the same
   hook);
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
   outages). Crash safety: the entries are derived from the checkpoint, so a crash before the
   write is repaired by :meth:`DriverState.resume_device_status` at the next start, and an
   apply that is repeated changes nothing.

Every failure is the failing claim's own error string, naming the claim and the field; the other
claims of the call proceed, whatever the input (a malformed UID, deeply nested configuration, a
file-system error: those are reported as what they are and are retryable). Prepare and unprepare
are idempotent, and a crash between any two steps is repaired by the next call (the checkpoint
says how far the claim got). Calls are serialised per driver, after the claim GETs, by a thread
lock and an ``flock`` on ``<state dir>/<driver>/serialize.lock``, so two instances on one node
(a rolling update) never prepare at once.

The checkpoint is read once and kept in memory (read again only when another instance wrote it).
When it was lost or damaged, the claims that still have CDI specs are rebuilt from them: their
devices are held (an exclusive device is never prepared for another claim; a shared one whose
share is unknown is refused with a retryable error until the recovered claim is unprepared; a
spec whose devices cannot be attributed refuses every prepare of the driver, retryably).
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from drakit.errors import (
    ConfigInvalid,
    ConflictError,
    DrakitError,
    NotFoundError,
    PermanentError,
    RetryableError,
)
from drakit.host.inventory import Inventory, InventorySnapshot
from drakit.host.pluginhost import PluginHost
from drakit.models import (
    AllocatedDevice,
    ClaimInfo,
    ClaimPrepareResult,
    ClaimRef,
    ClaimUnprepareResult,
    DeviceKey,
    PreparedDevice,
    PreparedDeviceRef,
)
from drakit.prepare.cdi import CdiWriter
from drakit.prepare.checkpoint import Checkpoint, CheckpointStore, ClaimPhase, ClaimRecord
from drakit.prepare.faults import crash_point
from drakit.prepare.safefs import check_component, ensure_dir, open_private

__all__ = [
    "MAX_CONFIG_DEPTH",
    "MAX_OPAQUE_BYTES",
    "ClaimSource",
    "DriverState",
    "PipelineObserver",
    "claim_ref_error",
]

log = logging.getLogger(__name__)

MAX_OPAQUE_BYTES = 10 * 1024
"""The API server's limit on one opaque parameters object; larger ones are refused here too."""

MAX_CONFIG_DEPTH = 32
"""How deeply an opaque parameters object may nest (objects and lists); deeper ones are refused."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_UID = 128
_MAX_SHOWN = 80


def _show(value: str) -> str:
    """A value from input, cut for error messages (a 10 KB name is not echoed back)."""
    return value if len(value) <= _MAX_SHOWN else value[: _MAX_SHOWN - 3] + "..."


def claim_ref_error(ref: ClaimRef) -> str:
    """Why the kubelet's claim reference is unusable ("" if it is fine), naming the field."""
    who = f"claim {_show(ref.namespace)}/{_show(ref.name)}"
    if not _DNS_LABEL.fullmatch(ref.namespace):
        return (
            f"{who}: namespace {_show(ref.namespace)!r} is not a Kubernetes namespace name "
            "(a lower-case DNS label of at most 63 characters)"
        )
    if len(ref.name) > 253 or not _DNS_SUBDOMAIN.fullmatch(ref.name):  # noqa: PLR2004
        return (
            f"{who}: name {_show(ref.name)!r} is not a ResourceClaim name "
            "(a lower-case DNS subdomain of at most 253 characters)"
        )
    try:
        check_component(ref.uid, "uid", max_bytes=_MAX_UID)
    except PermanentError as e:
        return f"{who}: {e}"
    return ""


def _too_deep(obj: object, limit: int) -> bool:
    """Whether ``obj`` nests objects/lists deeper than ``limit`` (iteratively: no recursion)."""
    stack: list[tuple[object, int]] = [(obj, 1)]
    while stack:
        o, depth = stack.pop()
        if isinstance(o, dict):
            children: list[object] = list(o.values())
        elif isinstance(o, list):
            children = list(o)
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


class ClaimSource(Protocol):
    """Where the pipeline GETs ResourceClaims (``drakit.kube.KubeClient`` in a node)."""

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim as JSON; raise PermanentError (not found) or RetryableError."""
        ...


class PipelineObserver(Protocol):
    """Receives timings and outcomes (the metrics module implements it)."""

    def observe(self, driver: str, op: str, result: str, seconds: float) -> None:
        """One prepare or unprepare of one claim finished."""
        ...


class ClaimError(DrakitError):
    """A failure that belongs to one claim; its message is returned to the kubelet."""


@dataclass
class _Planned:
    ref: ClaimRef
    devices: list[AllocatedDevice]
    owners: dict[str, list[AllocatedDevice]]
    status: frozenset[str] = frozenset()
    """This driver's ``status.devices`` entries as the claim GET saw them (canonical JSON)."""


@runtime_checkable
class DeviceStatusSink(Protocol):
    """Where ``status.devices`` entries are applied (``drakit.kube.KubeClient`` in a node)."""

    def apply_claim_device_status(
        self,
        namespace: str,
        name: str,
        uid: str,
        devices: list[dict[str, Any]],
        *,
        field_manager: str,
    ) -> dict[str, Any]:
        """Server-side apply this manager's entries; raise DrakitError on failure."""
        ...


def _entry_key(entry: Mapping[str, Any]) -> str:
    """One ``status.devices`` entry's identity and networkData, as canonical JSON."""
    keep = {k: entry[k] for k in ("pool", "device", "shareID", "networkData") if entry.get(k)}
    return json.dumps(keep, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class _StatusJob:
    namespace: str
    name: str
    uid: str
    devices: tuple[dict[str, Any], ...]


_STATUS_RETRY_S = (0.2, 1.0, 5.0, 15.0, 30.0)
"""Back-off between attempts of one networkData write; after the last the write is dropped."""


class _StatusWriter:
    """Applies ``status.devices`` networkData on its own thread, newest job per claim.

    Jobs never block the kubelet's call. A failed apply (API server away, 5xx, a conflict) is
    retried after each of :data:`_STATUS_RETRY_S`; a claim that is gone (404) or was replaced
    (another UID) is dropped. Unprepare cancels a claim's pending job. What is not written when
    the process dies is written again at the next start (:meth:`DriverState.resume_device_status`
    applies every prepared claim's entries from the checkpoint).
    """

    def __init__(self, sink: DeviceStatusSink, driver: str) -> None:
        self._sink = sink
        self._driver = driver
        self._manager = f"drakit/{driver}"[:128]
        self._cond = threading.Condition()
        self._jobs: dict[str, tuple[_StatusJob, int, float]] = {}  # uid -> job, attempt, due
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, job: _StatusJob) -> None:
        with self._cond:
            if self._closed:
                log.info("claim %s: stopping, networkData not written", job.uid)
                return
            self._jobs[job.uid] = (job, 0, 0.0)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"device-status-{self._driver}", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def cancel(self, uid: str) -> None:
        with self._cond:
            self._jobs.pop(uid, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _next(self) -> tuple[_StatusJob, int] | None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                due = [(d, uid) for uid, (_, _, d) in self._jobs.items()]
                if due:
                    when, uid = min(due)
                    if when <= now:
                        job, attempt, _ = self._jobs.pop(uid)
                        return job, attempt
                    self._cond.wait(when - now)
                else:
                    self._cond.wait()
            return None

    def _run(self) -> None:
        while (got := self._next()) is not None:
            job, attempt = got
            where = f"claim {job.namespace}/{job.name}"
            try:
                self._sink.apply_claim_device_status(
                    job.namespace,
                    job.name,
                    job.uid,
                    list(job.devices),
                    field_manager=self._manager,
                )
            except (ConflictError, RetryableError) as e:
                if attempt >= len(_STATUS_RETRY_S):
                    log.warning("%s: networkData not written, giving up: %s", where, e)
                    continue
                with self._cond:  # unless a newer job or an unprepare came meanwhile
                    due = time.monotonic() + _STATUS_RETRY_S[attempt]
                    self._jobs.setdefault(job.uid, (job, attempt + 1, due))
            except NotFoundError:
                log.info("%s: gone before its networkData was written", where)
            except DrakitError as e:
                log.warning("%s: could not write status.devices networkData: %s", where, e)
            except Exception:  # a sink bug must not end the writer thread
                log.exception("%s: writing networkData failed", where)


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
    ) -> None:
        if len(driver) > 253 or not _DNS_SUBDOMAIN.fullmatch(driver):  # noqa: PLR2004
            raise PermanentError(
                f"driver name {_show(driver)!r} is not a lower-case DNS subdomain; it names "
                "directories and sockets, so it must be one"
            )
        self.driver = driver
        self.host = host
        if inventory is None:
            inventory = Inventory(host)
            inventory.refresh()
        self.inventory = inventory
        self.claims = claims
        ensure_dir(state_dir)
        self.dir = ensure_dir(state_dir / driver)
        self.cdi = CdiWriter(cdi_dir, driver)
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
            _StatusWriter(claims, driver) if isinstance(claims, DeviceStatusSink) else None
        )

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
        out: dict[str, ClaimRecord] = {}
        missing = sorted(self.cdi.claim_uids() - set(cp.claims))
        if not missing:
            return out
        names: dict[str, list[DeviceKey]] = {}
        for key in self.inventory.current.devices_of(self.driver):
            names.setdefault(self.cdi.device_name("", key.device).lstrip("-_"), []).append(key)
        for uid in missing:
            results: list[PreparedDeviceRef] = []
            listed = self.cdi.read_devices(uid)
            prefix = self.cdi.device_name(uid, "")
            for cdi_name in listed or []:
                rest = cdi_name[len(prefix) :] if cdi_name.startswith(prefix) else ""
                match = max(
                    (n for n in names if rest == n or rest.startswith(n + "-")),
                    key=len,
                    default=None,
                )
                if match is None:
                    results = []
                    break
                results.extend(
                    PreparedDeviceRef(
                        requests=[],
                        pool=k.pool,
                        device=k.device,
                        cdi_device_ids=[f"{self.cdi.kind}={cdi_name}"],
                    )
                    for k in names[match]
                )
            out[uid] = ClaimRecord(
                namespace="",
                name="",
                uid=uid,
                phase=ClaimPhase.PREPARE_COMPLETED,
                results=results,
                cdi_spec=self.cdi.spec_name(uid),
                recovered=True,
            )
        return out

    # -- prepare -------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimPrepareResult]:
        """Prepare every claim; one entry per claim UID, errors per claim."""
        start = time.monotonic()
        out: dict[str, ClaimPrepareResult] = {}
        valid: list[ClaimRef] = []
        for ref in claims:
            err = claim_ref_error(ref)
            if err:
                out[ref.uid] = ClaimPrepareResult(error=err)
                self._observe("prepare", err, start)
            else:
                valid.append(ref)
        snap = self.inventory.current  # one discovery round for the whole call
        if len(valid) == 1:  # the common case: no hand-off to another thread
            fetched = [self._fetch(valid[0], snap)]
        elif valid:
            fetched = list(self._workers().map(functools.partial(self._fetch, snap=snap), valid))
        else:
            return out
        with self._serialized():
            done = self._prepare_locked(list(zip(valid, fetched, strict=True)), snap)
        for ref in valid:
            out[ref.uid] = done[ref.uid]
            self._observe("prepare", done[ref.uid].error, start)
        return out

    def _observe(self, op: str, error: str, start: float) -> None:
        if self.observer is not None:
            self.observer.observe(
                self.driver, op, "error" if error else "success", time.monotonic() - start
            )

    @staticmethod
    def _where(ref: ClaimRef) -> str:
        return f"claim {ref.namespace}/{ref.name}"

    def _fetch(self, ref: ClaimRef, snap: InventorySnapshot) -> _Planned | ClaimError:
        where = self._where(ref)
        try:
            obj = self.claims.get_resource_claim(ref.namespace, ref.name)
            crash_point("prepare-after-get")
            return self._plan(ref, obj, snap)
        except ClaimError as e:
            return e
        except RetryableError as e:
            return ClaimError(f"{where}: cannot read the claim, will retry: {e}")
        except DrakitError as e:
            return ClaimError(f"{where}: {e}")
        except RecursionError:
            return ClaimError(
                f"{where}: the claim's JSON is nested too deeply (usually an opaque "
                "configuration in status.allocation.devices.config[].opaque.parameters); "
                f"at most {MAX_CONFIG_DEPTH} levels are accepted there"
            )
        except Exception as e:  # noqa: BLE001 - a malformed claim fails alone, whatever broke
            return ClaimError(f"{where}: malformed claim: {_show(repr(e))}")

    def _plan(self, ref: ClaimRef, obj: dict[str, Any], snap: InventorySnapshot) -> _Planned:
        where = self._where(ref)
        uid = (obj.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(
                f"{where}: UID is {_show(str(uid))}, the kubelet asked for {ref.uid} (the claim "
                "was replaced)"
            )
        alloc = ((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}
        if not (obj.get("status") or {}).get("allocation"):
            raise ClaimError(f"{where}: not allocated (status.allocation is empty)")
        results = [r for r in alloc.get("results") or [] if r.get("driver") == self.driver]
        configs = self._configs(where, alloc.get("config") or [])
        devices: list[AllocatedDevice] = []
        owners: dict[str, list[AllocatedDevice]] = {}
        for i, r in enumerate(results):
            request = str(r.get("request", ""))
            key = DeviceKey(
                driver=self.driver, pool=str(r.get("pool", "")), device=str(r.get("device", ""))
            )
            owner = snap.owner_of(key)
            if owner is None:
                raise ClaimError(
                    f"{where}: request {_show(request)!r}: status.allocation.devices.results[{i}] "
                    f"names device {_show(key.device)!r} in pool {_show(key.pool)!r}, which this "
                    f"node does not publish for driver {self.driver}; the allocation is stale or "
                    "for another node"
                )
            base = request.split("/", 1)[0]
            field = f"status.allocation.devices.results[{i}]"
            share = r.get("shareID")
            if share is not None and (
                not isinstance(share, str) or not _DNS_SUBDOMAIN.fullmatch(share)
            ):
                raise ClaimError(f"{where}: {field}.shareID {_show(str(share))!r} is not a UID")
            capacity = r.get("consumedCapacity") or {}
            if not isinstance(capacity, dict):
                raise ClaimError(f"{where}: {field}.consumedCapacity must be an object")
            dev = AllocatedDevice(
                request=request,
                driver=self.driver,
                pool=key.pool,
                device=key.device,
                consumed_capacity={str(k): str(v) for k, v in capacity.items()},
                share_id=share,
                admin_access=bool(r.get("adminAccess")),
                config=tuple(
                    m for reqs, m in configs if not reqs or base in reqs or request in reqs
                ),
            )
            devices.append(dev)
            owners.setdefault(owner, []).append(dev)
        seen = (obj.get("status") or {}).get("devices") or []
        status = frozenset(
            _entry_key(e)
            for e in (seen if isinstance(seen, list) else [])
            if isinstance(e, dict) and e.get("driver") == self.driver
        )
        return _Planned(ref=ref, devices=devices, owners=owners, status=status)

    def _configs(
        self, where: str, entries: list[dict[str, Any]]
    ) -> list[tuple[set[str], BaseModel]]:
        """Validated opaque configs of this driver, class entries first, then claim entries."""
        if not isinstance(entries, list):
            raise ClaimError(f"{where}: status.allocation.devices.config must be a list")
        ordered = sorted(
            enumerate(entries),
            key=lambda ie: (0 if ie[1].get("source") == "FromClass" else 1, ie[0]),
        )
        out: list[tuple[set[str], BaseModel]] = []
        for i, entry in ordered:
            opaque = entry.get("opaque") or {}
            if opaque.get("driver") != self.driver:
                continue
            field = f"status.allocation.devices.config[{i}].opaque.parameters"
            source = "class" if entry.get("source") == "FromClass" else "claim"
            reqs = [str(r) for r in entry.get("requests") or []]
            scope = f"requests {_show(str(reqs))}" if reqs else "all requests"
            params = opaque.get("parameters")
            if not isinstance(params, dict):
                raise ClaimError(f"{where}: {field} ({source}, {scope}): must be a JSON object")
            if _too_deep(params, MAX_CONFIG_DEPTH):
                raise ClaimError(
                    f"{where}: {field} ({source}, {scope}): nested deeper than "
                    f"{MAX_CONFIG_DEPTH} levels; flatten the configuration"
                )
            size = len(json.dumps(params, separators=(",", ":"), ensure_ascii=False).encode())
            if size > MAX_OPAQUE_BYTES:
                raise ClaimError(
                    f"{where}: {field} ({source}, {scope}): {size} bytes; at most "
                    f"{MAX_OPAQUE_BYTES} are allowed"
                )
            try:
                model = self.host.parse_config(self.driver, params)
            except ConfigInvalid as e:
                details = "; ".join(f"{p}: {m}" if p else m for p, m in e.errors)
                raise ClaimError(f"{where}: {field} ({source}, {scope}): {details}") from e
            out.append((set(reqs), model))
        return out

    @staticmethod
    def _held(cp: Checkpoint, plugin: str, except_uid: str) -> list[PreparedDevice]:
        out: list[PreparedDevice] = []
        for uid, rec in cp.claims.items():
            if uid != except_uid:
                out.extend(rec.prepared.get(plugin, []))
        return out

    def _prepare_locked(
        self, fetched: Sequence[tuple[ClaimRef, _Planned | ClaimError]], snap: InventorySnapshot
    ) -> dict[str, ClaimPrepareResult]:
        """Steps 4-7 for every claim of one call, under the driver's lock."""
        out: dict[str, ClaimPrepareResult] = {}
        plans = [p for _, p in fetched if isinstance(p, _Planned)]
        for ref, p in fetched:
            if isinstance(p, ClaimError):
                out[ref.uid] = ClaimPrepareResult(error=str(p))
        try:
            cp = self.store.load()
            todo = self._admit(cp, plans, out, snap)
            if not todo:
                return out
        except DrakitError as e:  # the checkpoint cannot be read or written: retryable
            return out | self._failed(plans, e, out)
        completed: list[_Planned] = []
        for plan in todo:
            err = self._prepare_devices(cp, plan)
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
                self._where(plan.ref),
                plan.ref.uid,
                len(plan.devices),
            )
        return out

    def _failed(
        self, plans: Sequence[_Planned], e: DrakitError, done: dict[str, ClaimPrepareResult]
    ) -> dict[str, ClaimPrepareResult]:
        """The same error for every claim in ``plans`` that has no result in ``done`` yet."""
        return {
            p.ref.uid: ClaimPrepareResult(error=f"{self._where(p.ref)}: {e}")
            for p in plans
            if p.ref.uid not in done
        }

    def _admit(
        self,
        cp: Checkpoint,
        plans: Sequence[_Planned],
        out: dict[str, ClaimPrepareResult],
        snap: InventorySnapshot,
    ) -> list[_Planned]:
        """Step 4 in memory: the claims that need work get ``PrepareStarted`` records."""
        holders = self._holders(cp)
        todo: list[_Planned] = []
        for plan in plans:
            ref = plan.ref
            rec = cp.claims.get(ref.uid)
            if (
                rec is not None
                and rec.phase == ClaimPhase.PREPARE_COMPLETED
                and not rec.recovered
                and self.cdi.exists(ref.uid)
            ):
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
                out[ref.uid] = ClaimPrepareResult(error=f"{self._where(ref)}: {clash}")
                continue
            for d in plan.devices:  # later claims of this call see these as held
                holders.setdefault((d.pool, d.device), []).append(
                    (ref.uid, self._where(ref), False)
                )
            cp.claims[ref.uid] = ClaimRecord(
                namespace=ref.namespace,
                name=ref.name,
                uid=ref.uid,
                phase=ClaimPhase.PREPARE_STARTED,
                # every owning plugin is on the record before it is called: a composite's
                # members write it (each member durably, with what it returned), and what an
                # earlier record held (a reboot's demoted claim) stays on it
                prepared={p: [] for p in plan.owners} | (rec.prepared if rec is not None else {}),
            )
            todo.append(plan)
        return todo

    def _prepare_devices(self, cp: Checkpoint, plan: _Planned) -> str:
        """Steps 5-6 for one claim; updates its record in ``cp``; returns its error or ""."""
        ref = plan.ref
        where = self._where(ref)
        rec = cp.claims[ref.uid]
        try:
            prepared: dict[str, list[PreparedDevice]] = {}
            for plugin, devs in plan.owners.items():
                claim = ClaimInfo(
                    namespace=ref.namespace, name=ref.name, uid=ref.uid, devices=tuple(devs)
                )
                members = _MemberSession(self, cp, ref.uid, where)
                got = self.host.prepare(plugin, claim, self._held(cp, plugin, ref.uid), members)
                self._check_prepared(where, plugin, devs, got)
                prepared[plugin] = got
                rec = cp.claims[ref.uid]  # with what members prepared for this plugin
                rec = rec.model_copy(update={"prepared": {**rec.prepared, plugin: got}})
                cp.claims[ref.uid] = rec
            crash_point("prepare-after-plugin")
            edits = [
                (self._cdi_device(d), p.edits)
                for plugin, devs in plan.owners.items()
                for d, p in zip(devs, self._ordered(prepared[plugin], devs), strict=True)
            ]
            spec = self.cdi.build(ref.uid, edits)
            name = self.cdi.write(ref.uid, spec)
            crash_point("prepare-after-cdi")
        except DrakitError as e:
            log.warning("prepare of %s (uid %s) failed: %s", where, ref.uid, e)
            return f"{where}: {e}"
        except Exception as e:  # a plugin bug fails its claim, never the whole call
            log.exception("prepare of %s (uid %s) failed in a plugin", where, ref.uid)
            return f"{where}: internal error in a plugin: {_show(repr(e))}"
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

    def _save(self, cp: Checkpoint) -> None:
        self.store.save(cp)

    @staticmethod
    def _holders(cp: Checkpoint) -> dict[tuple[str, str], list[tuple[str, str, bool]]]:
        """(pool, device) -> [(uid, "claim ns/name", recovered)] for every record's devices."""
        out: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
        for uid, rec in cp.claims.items():
            who = f"{rec.namespace}/{rec.name}" if not rec.recovered else f"with UID {uid}"
            keys = {(r.pool, r.device) for r in rec.results}
            keys |= {(p.pool, p.device) for devs in rec.prepared.values() for p in devs}
            if rec.recovered and not rec.results:
                keys.add(("", ""))  # holds something unknown
            for key in keys:
                out.setdefault(key, []).append((uid, who, rec.recovered))
        return out

    def _clash(
        self,
        plan: _Planned,
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

    @staticmethod
    def _status_entries(driver: str, rec: ClaimRecord) -> list[dict[str, Any]]:
        """``status.devices`` entries for the devices of ``rec`` that have networkData."""
        shares = {(r.pool, r.device, tuple(r.requests)): r.share_id for r in rec.results}
        out: list[dict[str, Any]] = []
        for devs in rec.prepared.values():
            for p in devs:
                if p.network_data is None:
                    continue
                entry: dict[str, Any] = {"driver": driver, "pool": p.pool, "device": p.device}
                share = shares.get((p.pool, p.device, (p.request,)))
                if share:
                    entry["shareID"] = share
                entry["networkData"] = p.network_data.to_api()
                out.append(entry)
        return out

    def _write_device_status(self, rec: ClaimRecord, seen: frozenset[str] | None) -> bool:
        """Queue the apply of ``rec``'s networkData unless the claim already shows exactly it.

        ``seen``: this driver's entries in the claim as just read (``None``: unknown). Returns
        whether a write was queued.
        """
        if self._status is None:
            return False
        entries = self._status_entries(self.driver, rec)
        if not entries or (seen is not None and seen == {_entry_key(e) for e in entries}):
            return False
        self._status.submit(
            _StatusJob(namespace=rec.namespace, name=rec.name, uid=rec.uid, devices=tuple(entries))
        )
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
        out: dict[str, ClaimUnprepareResult] = {}
        valid: list[ClaimRef] = []
        for ref in claims:
            err = claim_ref_error(ref)
            if err:
                out[ref.uid] = ClaimUnprepareResult(error=err)
                self._observe("unprepare", err, start)
            else:
                valid.append(ref)
        if not valid:
            return out
        if self._status is not None:
            for ref in valid:
                self._status.cancel(ref.uid)
        with self._serialized():
            try:
                cp = self.store.load()
            except DrakitError as e:
                errors = {r.uid: f"{self._where(r)}: {e}" for r in valid}
            else:
                errors = self._unprepare_locked(cp, valid)
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
            return errors | {r.uid: f"{self._where(r)}: {e}" for r in done}
        for ref in done:
            crash_point("unprepare-after-checkpoint")
            log.info("unprepared claim %s (uid %s)", self._where(ref), ref.uid)
        return errors

    def _undo(self, rec: ClaimRecord | None, ref: ClaimRef) -> str:
        """The CDI spec and the plugins' unprepare hooks of one claim; its error or "".

        The plugins are those on the claim's record, with what each returned. Without a record
        of them (``rec`` is ``None``: no record at all, because a crash cut the prepare short
        before its one write or the checkpoint was lost; or a record rebuilt from the CDI spec)
        every backend of the driver is asked with ``prepared`` empty, and undoes by claim UID
        whatever it did (unprepare hooks are tolerant of claims they never saw).
        """
        where = self._where(ref)
        if rec is not None and rec.prepared:
            owners: Mapping[str, Sequence[PreparedDevice]] = rec.prepared
        else:
            owners = {p: [] for p in self.host.plugins_for_driver(self.driver)}
        try:
            self.cdi.remove(ref.uid)
            crash_point("unprepare-after-cdi")
            for plugin, prepared in owners.items():
                if plugin in self.host.backends:
                    self.host.unprepare(plugin, ref.uid, prepared)
                else:
                    log.warning(
                        "%s: plugin %r is no longer enabled; nothing to undo", where, plugin
                    )
            crash_point("unprepare-after-plugin")
        except DrakitError as e:
            log.warning("unprepare of %s (uid %s) failed: %s", where, ref.uid, e)
            return f"{where}: {e}"
        except Exception as e:  # a plugin bug fails its claim, never the whole call
            log.exception("unprepare of %s (uid %s) failed in a plugin", where, ref.uid)
            return f"{where}: internal error in a plugin: {_show(repr(e))}"
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
            update={"prepared": {**rec.prepared, plugin: devices}}
        )
        self.state._save(self.cp)

    def prepare(self, plugin: str, claim: ClaimInfo) -> list[PreparedDevice]:
        before = list(self.cp.claims[self.uid].prepared.get(plugin, []))
        if plugin not in self.cp.claims[self.uid].prepared:
            self._record(plugin, [])
        got = self.state.host.prepare(
            plugin,
            claim,
            DriverState._held(self.cp, plugin, self.uid),
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
