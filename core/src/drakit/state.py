"""The prepare/unprepare pipeline of one DRA driver on a node.

For each claim in a kubelet call (``docs/architecture.md``, "Prepare pipeline"):

1. GET the ResourceClaim (outside the lock, so slow API calls overlap) and check its UID and
   allocation;
2. take this driver's allocation results; check every device is one this node published;
3. resolve opaque configuration (class entries first, then claim entries, in allocation order;
   later wins) and validate each object through the owning plugin (the webhook uses the same
   hook);
4. record ``PrepareStarted`` in the checkpoint;
5. route each device to the plugin that discovered it (``drakit_prepare_devices``);
6. write one CDI spec for the claim, atomically;
7. record ``PrepareCompleted`` with what was returned, and return the CDI IDs per device.

Every failure is the failing claim's own error string; the other claims of the call proceed.
Prepare and unprepare are idempotent, and a crash between any two steps is repaired by the next
call (the checkpoint says how far the claim got). Calls are serialised per driver by a thread
lock and an ``flock`` on ``<state dir>/<driver>/serialize.lock``, so two instances on one node
(a rolling update) never prepare at once.
"""

from __future__ import annotations

import fcntl
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from drakit.cdi import CdiWriter
from drakit.checkpoint import Checkpoint, CheckpointStore, ClaimPhase, ClaimRecord
from drakit.errors import ConfigInvalid, DrakitError, PermanentError, RetryableError
from drakit.faults import crash_point
from drakit.kube import ConflictError
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
from drakit.pluginhost import PluginHost

__all__ = [
    "MAX_OPAQUE_BYTES",
    "ClaimSource",
    "DriverState",
    "PipelineObserver",
]

log = logging.getLogger(__name__)

MAX_OPAQUE_BYTES = 10 * 1024
"""The API server's limit on one opaque parameters object; larger ones are refused here too."""


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


class DriverState:
    """Implements the kubelet's NodePrepareResources/NodeUnprepareResources for one driver.

    Args:
        driver: the DRA driver name.
        host: the plugin host (device ownership, config validation, prepare hooks).
        claims: where ResourceClaims are read.
        state_dir: drakit's state directory; this driver uses ``<state_dir>/<driver>/``.
        cdi_dir: the CDI spec directory.
        boot_id: the node's current boot ID.
        on_repair: called when the checkpoint was repaired (see :class:`CheckpointStore`).
        observer: receives per-claim timings.
        get_workers: how many claim GETs run in parallel.
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
    ) -> None:
        self.driver = driver
        self.host = host
        self.claims = claims
        self.dir = state_dir / driver
        self.dir.mkdir(parents=True, exist_ok=True)
        self.store = CheckpointStore(self.dir / "checkpoint.json", driver, boot_id, on_repair)
        self.cdi = CdiWriter(cdi_dir, driver)
        self.observer = observer
        self._lock = threading.Lock()
        self._lock_path = self.dir / "serialize.lock"
        self._pool = ThreadPoolExecutor(max_workers=get_workers, thread_name_prefix="claim-get")

    def close(self) -> None:
        """Stop the GET worker pool."""
        self._pool.shutdown(wait=True)

    @contextmanager
    def _serialized(self) -> Iterator[None]:
        with self._lock:
            fd = self._lock_path.open("a+")
            try:
                fcntl.flock(fd.fileno(), fcntl.LOCK_EX)
                yield
            finally:
                fd.close()

    def prepared_claims(self) -> dict[str, ClaimRecord]:
        """The checkpoint's claims (for tests, metrics and the CLI)."""
        with self._serialized():
            return dict(self.store.load().claims)

    # -- prepare -------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimPrepareResult]:
        """Prepare every claim; one entry per claim UID, errors per claim."""
        started = {c.uid: time.monotonic() for c in claims}
        fetched = list(self._pool.map(self._fetch, claims))
        out: dict[str, ClaimPrepareResult] = {}
        with self._serialized():
            cp = self.store.load()
            for ref, plan in zip(claims, fetched, strict=True):
                if isinstance(plan, ClaimError):
                    out[ref.uid] = ClaimPrepareResult(error=str(plan))
                else:
                    out[ref.uid] = self._prepare_one(cp, plan)
                self._observe("prepare", out[ref.uid].error, started[ref.uid])
        return out

    def _observe(self, op: str, error: str, start: float) -> None:
        if self.observer is not None:
            self.observer.observe(
                self.driver, op, "error" if error else "success", time.monotonic() - start
            )

    def _fetch(self, ref: ClaimRef) -> _Planned | ClaimError:
        where = f"claim {ref.namespace}/{ref.name}"
        try:
            obj = self.claims.get_resource_claim(ref.namespace, ref.name)
        except RetryableError as e:
            return ClaimError(f"{where}: cannot read the claim, will retry: {e}")
        except DrakitError as e:
            return ClaimError(f"{where}: {e}")
        crash_point("prepare-after-get")
        try:
            return self._plan(ref, obj)
        except ClaimError as e:
            return e
        except DrakitError as e:
            return ClaimError(f"{where}: {e}")
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # malformed claim JSON
            return ClaimError(f"{where}: malformed claim: {e!r}")

    def _plan(self, ref: ClaimRef, obj: dict[str, Any]) -> _Planned:
        where = f"claim {ref.namespace}/{ref.name}"
        uid = (obj.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(
                f"{where}: UID is {uid}, the kubelet asked for {ref.uid} (the claim was replaced)"
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
            owner = self.host.owner_of(key)
            if owner is None:
                raise ClaimError(
                    f"{where}: request {request!r}: status.allocation.devices.results[{i}] names "
                    f"device {key.device!r} in pool {key.pool!r}, which this node does not "
                    f"publish for driver {self.driver}; the allocation is stale or for another node"
                )
            base = request.split("/", 1)[0]
            dev = AllocatedDevice(
                request=request,
                driver=self.driver,
                pool=key.pool,
                device=key.device,
                consumed_capacity={k: str(v) for k, v in (r.get("consumedCapacity") or {}).items()},
                share_id=r.get("shareID"),
                admin_access=bool(r.get("adminAccess")),
                config=tuple(
                    m for reqs, m in configs if not reqs or base in reqs or request in reqs
                ),
            )
            devices.append(dev)
            owners.setdefault(owner, []).append(dev)
        return _Planned(ref=ref, devices=devices, owners=owners)

    def _configs(
        self, where: str, entries: list[dict[str, Any]]
    ) -> list[tuple[set[str], BaseModel]]:
        """Validated opaque configs of this driver, class entries first, then claim entries."""
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
            reqs = list(entry.get("requests") or [])
            scope = f"requests {reqs}" if reqs else "all requests"
            params = opaque.get("parameters")
            if not isinstance(params, dict):
                raise ClaimError(f"{where}: {field} ({source}, {scope}): must be a JSON object")
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

    def _held(self, cp: Checkpoint, plugin: str, except_uid: str) -> list[PreparedDevice]:
        out: list[PreparedDevice] = []
        for uid, rec in cp.claims.items():
            if uid != except_uid:
                out.extend(rec.prepared.get(plugin, []))
        return out

    def _prepare_one(self, cp: Checkpoint, plan: _Planned) -> ClaimPrepareResult:
        ref = plan.ref
        rec = cp.claims.get(ref.uid)
        if (
            rec is not None
            and rec.phase == ClaimPhase.PREPARE_COMPLETED
            and self.cdi.exists(ref.uid)
        ):
            return ClaimPrepareResult(devices=rec.results)  # idempotent repeat: no side effects
        if rec is not None and rec.phase == ClaimPhase.UNPREPARE_STARTED:
            err = self._unprepare_one(cp, ref)  # finish the interrupted unprepare first
            if err:
                return ClaimPrepareResult(error=err)
        rec = ClaimRecord(
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
            phase=ClaimPhase.PREPARE_STARTED,
            # every owning plugin is on record before it is called, so an unprepare after a
            # crash mid-prepare still reaches it (with what it had returned, or nothing)
            prepared={p: [] for p in plan.owners} | (rec.prepared if rec is not None else {}),
        )
        cp.claims[ref.uid] = rec
        self.store.save(cp)
        where = f"claim {ref.namespace}/{ref.name}"
        clash = self._exclusive_clash(cp, plan)
        if clash:
            del cp.claims[ref.uid]
            self.store.save(cp)
            return ClaimPrepareResult(error=f"{where}: {clash}")
        try:
            prepared: dict[str, list[PreparedDevice]] = {}
            for plugin, devs in plan.owners.items():
                claim = ClaimInfo(
                    namespace=ref.namespace, name=ref.name, uid=ref.uid, devices=tuple(devs)
                )
                got = self.host.prepare(plugin, claim, self._held(cp, plugin, ref.uid))
                self._check_prepared(where, plugin, devs, got)
                prepared[plugin] = got
                rec.prepared = {**rec.prepared, plugin: got}
            crash_point("prepare-after-plugin")
            edits = [
                (self._cdi_device(d), p.edits)
                for plugin, devs in plan.owners.items()
                for d, p in zip(devs, self._ordered(prepared[plugin], devs), strict=True)
            ]
            spec = self.cdi.build(ref.uid, edits)
            rec.cdi_spec = self.cdi.write(ref.uid, spec)
            crash_point("prepare-after-cdi")
        except DrakitError as e:
            self.store.save(cp)  # keep what was prepared, so unprepare can undo it
            log.warning("prepare of %s (uid %s) failed: %s", where, ref.uid, e)
            return ClaimPrepareResult(error=f"{where}: {e}")
        except Exception as e:  # a plugin bug fails its claim, never the whole call
            self.store.save(cp)
            log.exception("prepare of %s (uid %s) failed in a plugin", where, ref.uid)
            return ClaimPrepareResult(error=f"{where}: internal error in a plugin: {e!r}")
        rec.results = [
            PreparedDeviceRef(
                requests=[d.request],
                pool=d.pool,
                device=d.device,
                cdi_device_ids=[self.cdi.device_id(ref.uid, self._cdi_device(d))],
                share_id=d.share_id,
            )
            for d in plan.devices
        ]
        rec.phase = ClaimPhase.PREPARE_COMPLETED
        self.store.save(cp)
        crash_point("prepare-after-checkpoint")
        if any(p.network_data for devs in prepared.values() for p in devs):
            try:  # off the kubelet's call: two API round trips it need not wait for
                self._pool.submit(self._write_network_data, ref, plan, prepared)
            except RuntimeError:  # the pool is shut down: the node is stopping
                log.info("claim %s: stopping, networkData not written", ref.uid)
        log.info("prepared claim %s (uid %s): %d devices", where, ref.uid, len(plan.devices))
        return ClaimPrepareResult(devices=rec.results)

    def _write_network_data(
        self, ref: ClaimRef, plan: _Planned, prepared: dict[str, list[PreparedDevice]]
    ) -> None:
        """Best effort, in the GET pool: put the devices' ``networkData`` into ``status.devices``.

        Only when a plugin returned some and the claim source can write status (the API
        server's client has ``update_resource_claim_status``). Entries of
        other drivers are kept; a conflict is retried once; a failure is logged, never the
        claim's error (the devices are prepared).
        """
        ours: list[dict[str, Any]] = []
        for plugin, devs in plan.owners.items():
            for d, p in zip(devs, self._ordered(prepared[plugin], devs), strict=True):
                if p.network_data is None:
                    continue
                entry: dict[str, Any] = {"driver": self.driver, "pool": d.pool, "device": d.device}
                if d.share_id:
                    entry["shareID"] = d.share_id
                entry["networkData"] = p.network_data.to_api()
                ours.append(entry)
        writer = getattr(self.claims, "update_resource_claim_status", None)
        if not ours or writer is None:
            return
        where = f"claim {ref.namespace}/{ref.name}"
        for attempt in (1, 2):
            try:
                obj = self.claims.get_resource_claim(ref.namespace, ref.name)
                if obj.get("metadata", {}).get("uid") != ref.uid:
                    return
                status = obj.setdefault("status", {})
                keep = [e for e in status.get("devices") or [] if e.get("driver") != self.driver]
                status["devices"] = keep + ours
                writer(obj)
                return
            except DrakitError as e:
                if attempt == 2 or not isinstance(e, ConflictError):  # noqa: PLR2004
                    log.warning("%s: could not write status.devices networkData: %s", where, e)
                    return

    def _exclusive_clash(self, cp: Checkpoint, plan: _Planned) -> str:
        """The last line of defence against double use: an exclusive device held elsewhere."""
        holders: dict[tuple[str, str], str] = {}
        for uid, rec in cp.claims.items():
            if uid != plan.ref.uid:
                for r in rec.results:
                    holders[(r.pool, r.device)] = f"{rec.namespace}/{rec.name}"
        for d in plan.devices:
            dev = self.host.device(d.key)
            shared = dev is not None and bool(dev.allow_multiple_allocations)
            holder = holders.get((d.pool, d.device))
            if holder and not shared:
                return (
                    f"request {d.request!r}: device {d.device!r} is still prepared for claim "
                    f"{holder} and cannot be shared (no allowMultipleAllocations); the "
                    "allocation is stale, the kubelet will retry after that claim is released"
                )
        return ""

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
        out: dict[str, ClaimUnprepareResult] = {}
        with self._serialized():
            cp = self.store.load()
            for ref in claims:
                start = time.monotonic()
                out[ref.uid] = ClaimUnprepareResult(error=self._unprepare_one(cp, ref))
                self._observe("unprepare", out[ref.uid].error, start)
        return out

    def _unprepare_one(self, cp: Checkpoint, ref: ClaimRef) -> str:
        where = f"claim {ref.namespace}/{ref.name}"
        rec = cp.claims.get(ref.uid)
        if rec is None:
            self.cdi.remove(ref.uid)  # a spec left by a lost checkpoint is removed by name
            return ""
        rec.phase = ClaimPhase.UNPREPARE_STARTED
        self.store.save(cp)
        try:
            for plugin, prepared in rec.prepared.items():
                if plugin in self.host.backends:
                    self.host.unprepare(plugin, ref.uid, prepared)
                else:
                    log.warning(
                        "%s: plugin %r is no longer enabled; nothing to undo", where, plugin
                    )
        except DrakitError as e:
            log.warning("unprepare of %s (uid %s) failed: %s", where, ref.uid, e)
            return f"{where}: {e}"
        except Exception as e:  # a plugin bug fails its claim, never the whole call
            log.exception("unprepare of %s (uid %s) failed in a plugin", where, ref.uid)
            return f"{where}: internal error in a plugin: {e!r}"
        crash_point("unprepare-after-plugin")
        self.cdi.remove(ref.uid)
        crash_point("unprepare-after-cdi")
        del cp.claims[ref.uid]
        self.store.save(cp)
        crash_point("unprepare-after-checkpoint")
        log.info("unprepared claim %s (uid %s)", where, ref.uid)
        return ""
