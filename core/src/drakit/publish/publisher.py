"""Keep this node's ResourceSlices in the API server equal to what discovery found.

:class:`ResourceSlicePublisher` reconciles, per ``(driver, pool)``, the slices rendered by
:func:`drakit.publish.render.render_pool` with the slices the API server holds for this node. The
algorithm and its guarantees are described in ``docs/publishing.md``; in short:

* steady state makes no writes: observed slices are compared semantically with the desired
  ones (server-set metadata, defaulted fields, taint ``timeAdded`` and quantity spelling are
  ignored), and a slice the publisher wrote itself is recognised by its ``resourceVersion``;
* a pool's generation is bumped, and all its slices rewritten, only when the pool's content
  changes; a slice deleted or edited by someone else is restored in place;
* slices are owned by the Node (garbage-collected with it) and left in place on shutdown, so a
  successor adopts them without a write;
* a watch on this node's slices triggers a resync within a fraction of a second; a periodic
  resync (which also re-runs discovery) catches anything else;
* failures back off exponentially (0.5 s to 30 s, with jitter) and never hot-loop; fields the
  API server silently drops (a feature gate is off) are reported once, naming the field and
  the gate.
"""

from __future__ import annotations

import copy
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from drakit.errors import ConflictError, DrakitError, NotFoundError, PermanentError, RetryableError
from drakit.publish.diff import (
    PoolKey,
    dropped_fields,
    fingerprint,
    gate_for_path,
    generation_of,
    keep_time_added,
    name_of,
    pool_key,
    resource_version,
    semantically_equal,
)
from drakit.publish.render import PoolSpec, check_pool, render_checked

if TYPE_CHECKING:
    from drakit.kube import KubeClient  # the Kubernetes client loads only where a node has one

__all__ = [
    "DroppedFieldsError",
    "ResourceSlicePublisher",
    "SyncResult",
    "WriteCounts",
]

logger = logging.getLogger(__name__)

WATCH_RETRY_MAX = 8.0
"""Longest wait between watch reconnects while the API server is unreachable (seconds).

At most 8 s, so a node notices the API server's return within that long, however long the
outage (``tests/e2e/test_node_faults.py::test_api_server_outage_of_60s``).

Each wait is drawn from 10-100 % of ``min(WATCH_RETRY_MAX, 0.5 s x 2^(n-1))`` (full jitter): the
watches of a whole fleet break together when the API server restarts, and with the 80-100 %
jitter of the first version, at a 5 s cap, 1,000 simulated nodes reconnected in step, a TLS
handshake each, once every 4-5 s, and kept the restarted 2-core API server from finishing its
own start (``benchmarks/fleet.py``, ``benchmarks/README.md``, "Fleet")."""


class DroppedFieldsError(PermanentError):
    """The API server accepted a slice but dropped fields of it (a feature gate is off).

    Attributes:
        slice_name: The ResourceSlice.
        paths: The dropped field paths (``spec.devices[0].allowMultipleAllocations``).
    """

    def __init__(self, slice_name: str, paths: Sequence[str]) -> None:
        self.slice_name = slice_name
        self.paths = list(paths)
        first = self.paths[0]
        gate = gate_for_path(first)
        hint = f": enable the {gate} feature gate" if gate else ""
        more = f" (and {len(self.paths) - 1} more field(s))" if len(self.paths) > 1 else ""
        super().__init__(
            f"ResourceSlice {slice_name}: {first} was dropped by the API server{hint}{more}"
        )


@dataclass
class WriteCounts:
    """Writes sent to the API server (cumulative, for metrics)."""

    creates: int = 0
    updates: int = 0
    deletes: int = 0

    @property
    def total(self) -> int:
        """All writes."""
        return self.creates + self.updates + self.deletes

    def copy(self) -> WriteCounts:
        """A snapshot."""
        return WriteCounts(self.creates, self.updates, self.deletes)


@dataclass(frozen=True)
class SyncResult:
    """What one :meth:`ResourceSlicePublisher.sync_once` did.

    Attributes:
        creates: Slices created.
        updates: Slices updated.
        deletes: Slices deleted.
        pools: Desired pools.
        slices: Desired slices.
        rejected: Devices and counter sets left out because the API server would reject them.
        generations: ``(driver, pool)`` -> the generation now published.
    """

    creates: int
    updates: int
    deletes: int
    pools: int
    slices: int
    generations: dict[PoolKey, int] = field(default_factory=dict)
    rejected: int = 0

    @property
    def writes(self) -> int:
        """All writes of this round."""
        return self.creates + self.updates + self.deletes


@dataclass
class _PoolState:
    generation: int
    rendered: list[dict[str, Any]]  # render_pool(spec, generation=0): the pool's content


@dataclass(frozen=True)
class _Checked:
    """A pool as last discovered, checked and rendered (reused while discovery is unchanged)."""

    spec: PoolSpec
    rendered: list[dict[str, Any]]
    rejected: list[str]


@dataclass(frozen=True)
class _Wanted:
    """The objects to publish for one rendering at one generation, with their fingerprints."""

    rendered: list[dict[str, Any]]
    generation: int
    uid: str
    objects: list[tuple[dict[str, Any], str]]


@dataclass
class _Written:
    fingerprint: str
    resource_version: str


# ------------------------------------------------------------------ publisher


class ResourceSlicePublisher:
    """Publishes this node's ResourceSlices and keeps them published.

    Args:
        kube: The API client.
        node_name: This node; every slice gets ``spec.nodeName`` and an owner reference to it.
        desired: Returns the pools to publish (e.g. ``lambda: build_inventory(host).pools``);
            called once per ``interval`` (re-discovery). Raising skips the round and leaves the
            published slices alone.
        drivers: The drivers this publisher owns on this node: their slices that are not desired
            are deleted. Other drivers' slices are never touched.
        interval: Seconds between re-discovery + full resyncs.
        owner_node_uid: The Node's UID; looked up (and refreshed before creating slices) when
            ``None``.
        backoff_initial: First retry delay after a failure, seconds.
        backoff_max: Cap of the retry delay, seconds.
        settle: Seconds to wait after a watch event before resyncing (coalesces bursts).
        watch_timeout: Seconds a single watch request lasts before it is renewed.
        record_events: Record a Warning Event on the Node when fields are dropped.
        on_first_sync: Called once, on the publishing thread, after the first sync that
            succeeded (``drakit node`` gives the start-up's freed C heap back then); an error it
            raises is logged, never raised.
        discovered: What ``desired`` returned just before, when the caller has called it
            (``drakit node`` discovers before it serves the kubelet): the first round publishes
            it instead of discovering again (unless :meth:`trigger` asked for a rediscovery),
            and the loop's next discovery is one ``interval`` later. Checked like every result
            of ``desired``.
    """

    def __init__(
        self,
        kube: KubeClient,
        node_name: str,
        desired: Callable[[], Iterable[PoolSpec]],
        *,
        drivers: set[str],
        interval: float = 60.0,
        owner_node_uid: str | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        settle: float = 0.1,
        watch_timeout: int = 300,
        record_events: bool = True,
        on_first_sync: Callable[[], None] | None = None,
        discovered: Iterable[PoolSpec] | None = None,
    ) -> None:
        if not drivers:
            raise ValueError("drivers must name at least one driver")
        self._kube = kube
        self.node_name = node_name
        self._desired = desired
        self.drivers = frozenset(drivers)
        self.interval = interval
        self._given_uid = owner_node_uid
        self._uid: str | None = owner_node_uid
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.settle = settle
        self.watch_timeout = watch_timeout
        self._record_events = record_events
        self._on_first_sync = on_first_sync

        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._cache: list[PoolSpec] | None = None
        self._discovered = None if discovered is None else list(discovered)
        self._pools: dict[PoolKey, _PoolState] = {}
        self._written: dict[str, _Written] = {}
        self._expected: set[str] = set()
        self._dropped: dict[str, str] = {}
        self._dropped_names: dict[str, tuple[str, frozenset[str]]] = {}
        self._reported: set[str] = set()
        self._rejected: dict[PoolKey, list[str]] = {}
        self._checked: dict[PoolKey, _Checked] = {}
        self._wanted: dict[PoolKey, _Wanted] = {}
        self._rejections_reported: set[str] = set()
        self._deleted: set[str] = set()
        self._rng = random.Random()  # noqa: S311 - jitter, not cryptography

        self.writes = WriteCounts()
        """Cumulative creates/updates/deletes sent (for metrics)."""
        self.last_error: str | None = None
        """The last error (or the dropped-fields report while it applies); ``None`` when clean."""
        self.synced = False
        """Whether the last sync succeeded (the node's slices are published): for ``/readyz``."""
        self.syncs = 0
        """Completed sync rounds."""
        self.sync_errors = 0
        """Sync rounds that failed."""
        self.last_sync: float | None = None
        """Wall-clock time of the last successful sync."""

    # ----------------------------------------------------------------- public

    @property
    def rejected(self) -> dict[PoolKey, list[str]]:
        """``(driver, pool)`` -> why each device or counter set left out of it was rejected.

        A device the API server would reject (:func:`drakit.publish.render.check_pool`) is left out
        of its pool, which is published without it; the error is logged and recorded as a Warning
        Event on the Node once, and counted here until discovery stops returning it.
        """
        return {k: list(v) for k, v in self._rejected.items()}

    def rejected_by_driver(self) -> dict[str, int]:
        """Driver -> devices and counter sets left out of its pools (for a metric)."""
        out: dict[str, int] = dict.fromkeys(sorted(self.drivers), 0)
        for (driver, _), reasons in self._rejected.items():
            out[driver] = out.get(driver, 0) + len(reasons)
        return out

    @property
    def dropped(self) -> dict[str, str]:
        """Slice name -> the dropped-fields report, while the API server keeps dropping them."""
        return dict(self._dropped)

    def dropped_fields(self, driver: str) -> frozenset[str]:
        """Names of the fields (``consumesCounters``) the API server drops from ``driver``'s slices.

        Empty once the server keeps everything that is sent. Backends see it through
        ``PluginContext.dropped_fields`` and may publish without the feature.
        """
        return frozenset(
            name for d, names in list(self._dropped_names.values()) if d == driver for name in names
        )

    def generation(self, driver: str, pool: str) -> int | None:
        """The generation last published for a pool (``None`` if unknown)."""
        state = self._pools.get((driver, pool))
        return state.generation if state else None

    def trigger(self, *, rediscover: bool = False) -> None:
        """Ask the running loop for a round now (e.g. device health changed the taints).

        Args:
            rediscover: have that round call ``desired`` again instead of reusing the last
                discovery (device taints are set at discovery).
        """
        if rediscover:
            self._force_rediscover = True
        self._notify("changed")

    def sync_once(self, *, rediscover: bool = True) -> SyncResult:
        """Reconcile once: (re-)discover, list this node's slices, write the differences.

        Args:
            rediscover: Call ``desired`` (else reuse its last result, if any).

        Returns:
            What was written.

        Raises:
            RetryableError: The API server is unreachable or overloaded (nothing is lost: the
                next round starts over).
            DroppedFieldsError: Slices were written but the server dropped fields.
            PermanentError: A write or the discovery failed for a reason retrying won't fix
                (the other pools are still reconciled).
        """
        with self._lock:
            try:
                result, errors = self._sync(rediscover)
            except DrakitError as exc:
                self._failed(exc)
                raise
            hard = [e for e in errors if not isinstance(e, DroppedFieldsError)]
            if hard:
                first = next((e for e in hard if isinstance(e, RetryableError)), hard[0])
                self._failed(first)
                raise first
            self.syncs += 1
            self.synced = True
            self.last_sync = time.time()
            self.last_error = next(iter(self._dropped.values()), None)
            if self._on_first_sync is not None:
                callback, self._on_first_sync = self._on_first_sync, None
                try:
                    callback()
                except Exception:
                    logger.exception("the first-sync callback failed")
            if errors:
                raise errors[0]
            return result

    def run(self, stop_event: threading.Event) -> None:
        """Publish until ``stop_event`` is set (run it in a thread). Slices stay on exit."""
        watcher = threading.Thread(
            target=self._watch_loop, args=(stop_event,), name="drakit-slice-watch", daemon=True
        )
        stopper = threading.Thread(
            target=self._notify_on_stop, args=(stop_event,), name="drakit-slice-stop", daemon=True
        )
        stopper.start()
        watcher.start()
        failures = 0
        next_discovery = 0.0
        try:
            while not stop_event.is_set():
                rediscover = time.monotonic() >= next_discovery
                with self._cond:  # this round reads everything afresh
                    self._pending -= {"changed", "reconnected"}
                try:
                    self.sync_once(rediscover=rediscover)
                    failures = 0
                except DroppedFieldsError as exc:
                    failures = 0
                    logger.debug("dropped fields reported: %s", exc)
                except DrakitError as exc:
                    failures += 1
                    delay = self._backoff(failures)
                    level = (
                        logging.INFO  # raced with another writer: the next round looks again
                        if isinstance(exc, ConflictError | NotFoundError)
                        else logging.WARNING
                        if isinstance(exc, RetryableError)
                        else logging.ERROR
                    )
                    logger.log(
                        level, "publishing ResourceSlices failed (retry in %.1fs): %s", delay, exc
                    )
                except Exception as exc:
                    failures += 1
                    self._failed(PermanentError(f"unexpected error: {exc!r}"))
                    logger.exception("publishing ResourceSlices failed unexpectedly")
                next_discovery = self._discovered_at + self.interval
                if failures:
                    # Only the stop or a watch that reconnects after an outage cut a backoff short.
                    self._wait(self._backoff_delay, {"stop", "reconnected"})
                else:
                    self._wait(
                        max(0.0, next_discovery - time.monotonic()),
                        {"stop", "changed", "reconnected"},
                    )
                    if not stop_event.is_set() and self.settle > 0:
                        stop_event.wait(self.settle)
        finally:
            with self._cond:
                self._pending.add("stop")
                self._cond.notify_all()
            watcher.join(timeout=5)
            logger.info("ResourceSlice publisher stopped; slices left in place for the successor")

    # ------------------------------------------------------------------ sync

    def _failed(self, exc: DrakitError) -> None:
        self.synced = False
        self.sync_errors += 1
        self.last_error = str(exc)

    def _backoff(self, failures: int) -> float:
        base = min(self.backoff_max, self.backoff_initial * 2 ** min(failures - 1, 30))
        self._backoff_delay = min(self.backoff_max, base * self._rng.uniform(0.8, 1.2))
        return self._backoff_delay

    _backoff_delay = 0.5
    _discovered_at = -1e9

    _force_rediscover = False

    def _discover(self, rediscover: bool) -> list[PoolSpec]:
        given, self._discovered = self._discovered, None
        if given is not None and not self._force_rediscover:
            return self._accept(given)  # the constructor's ``discovered``: this round's result
        if rediscover or self._cache is None or self._force_rediscover:
            self._force_rediscover = False  # before desired(): a trigger during it counts
            try:
                pools = list(self._desired())
            except DrakitError:
                raise
            except Exception as exc:
                raise PermanentError(f"discovery failed: {exc!r}") from exc
            return self._accept(pools)
        return self._cache

    def _accept(self, pools: list[PoolSpec]) -> list[PoolSpec]:
        """Check one discovery's result and make it the pools to publish."""
        seen: set[PoolKey] = set()
        for p in pools:
            key = (p.driver, p.pool)
            if p.driver not in self.drivers:
                raise PermanentError(
                    f"pool {p.pool!r} of driver {p.driver!r}: the publisher only owns drivers "
                    f"{sorted(self.drivers)}"
                )
            if p.node != self.node_name:
                raise PermanentError(
                    f"pool {p.driver}/{p.pool} is for node {p.node!r}, "
                    f"not this node ({self.node_name!r})"
                )
            if key in seen:
                raise PermanentError(f"pool {p.driver}/{p.pool} is desired twice")
            seen.add(key)
        self._cache = pools
        self._discovered_at = time.monotonic()
        return pools

    def _owner_uid(self, *, refresh: bool = False) -> str:
        if self._given_uid:
            return self._given_uid
        if self._uid is None or refresh:
            node = self._kube.get_node(self.node_name)
            if node is None:
                raise RetryableError(
                    f"node {self.node_name!r} does not exist: ResourceSlices are owned by their "
                    "Node (and garbage-collected with it), so none are published until it does"
                )
            uid = str(node.get("metadata", {}).get("uid", ""))
            if uid != self._uid and self._uid is not None:
                logger.info("node %s was re-created (uid %s -> %s)", self.node_name, self._uid, uid)
            self._uid = uid
        return self._uid

    def _render_all(
        self, pools: Iterable[PoolSpec], errors: list[DrakitError]
    ) -> tuple[dict[PoolKey, list[dict[str, Any]]], set[PoolKey]]:
        """Render each pool at generation 0, without the devices the API server would reject.

        A pool whose driver or pool name is invalid is left alone (``protected``).
        """
        rendered: dict[PoolKey, list[dict[str, Any]]] = {}
        protected: set[PoolKey] = set()
        rejected: dict[PoolKey, list[str]] = {}
        checked_now: dict[PoolKey, _Checked] = {}
        for spec in pools:
            key = (spec.driver, spec.pool)
            cached = self._checked.get(key)
            if cached is None or not (cached.spec is spec or cached.spec == spec):
                try:
                    kept, refused = check_pool(spec)
                except DrakitError as exc:  # SliceValidationError: keep what is published
                    errors.append(exc)
                    protected.add(key)
                    continue
                cached = _Checked(spec, render_checked(kept), [str(e) for e in refused])
            checked_now[key] = cached
            rendered[key] = cached.rendered
            if cached.rejected:
                rejected[key] = cached.rejected
        self._checked = checked_now
        self._rejected = rejected
        return rendered, protected

    def _report_rejections(self) -> None:
        """Log and record an Event for each rejection once, while it lasts."""
        current = {m for reasons in self._rejected.values() for m in reasons}
        for message in sorted(current - self._rejections_reported):
            logger.error("device left out of its ResourceSlices: %s", message)
            self._event("DeviceRejected", f"left out of the ResourceSlices: {message}")
        self._rejections_reported = current

    def _event(self, reason: str, message: str) -> None:
        if not (self._record_events and self._uid):
            return
        involved = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self._uid}
        try:
            self._kube.create_event(involved, reason, message)
        except DrakitError as err:
            logger.debug("could not record the %s event: %s", reason, err)

    def _sync(self, rediscover: bool) -> tuple[SyncResult, list[DrakitError]]:
        errors: list[DrakitError] = []
        rendered, protected = self._render_all(self._discover(rediscover), errors)
        uid = self._owner_uid()
        self._report_rejections()
        observed = [
            s
            for s in self._kube.list_resource_slices(self.node_name)
            if s.get("spec", {}).get("driver") in self.drivers
        ]
        by_pool: dict[PoolKey, list[dict[str, Any]]] = {}
        for s in observed:
            by_pool.setdefault(pool_key(s), []).append(s)
        by_name = {name_of(s): s for s in observed}
        self._expected = {name_of(o) for objs in rendered.values() for o in objs} | {
            name_of(s) for key in protected for s in by_pool.get(key, [])
        }

        before = self.writes.copy()
        self._deleted = set()  # this round's deletes: a slice is deleted once
        generations: dict[PoolKey, int] = {}
        undesired = sorted(by_pool.keys() - rendered.keys() - protected)
        jobs: list[tuple[PoolKey, Callable[[], None]]] = [
            (key, partial(self._sync_pool, key, rendered[key], by_pool.get(key, []), by_name, uid))
            for key in sorted(rendered)
        ]
        jobs += [(key, partial(self._delete_all, by_pool[key])) for key in undesired]
        for key, job in jobs:
            try:
                job()
            except DroppedFieldsError as exc:
                errors.append(exc)
            except DrakitError as exc:
                errors.append(exc)
                if isinstance(exc, RetryableError):
                    break  # the server is gone: no point trying the other pools now
            if key in self._pools:
                generations[key] = self._pools[key].generation
        self._forget(rendered.keys() | protected)
        result = SyncResult(
            creates=self.writes.creates - before.creates,
            updates=self.writes.updates - before.updates,
            deletes=self.writes.deletes - before.deletes,
            pools=len(rendered),
            slices=sum(len(v) for v in rendered.values()),
            generations=generations,
            rejected=sum(len(v) for v in self._rejected.values()),
        )
        if result.writes:
            logger.info(
                "ResourceSlices of node %s: %d created, %d updated, %d deleted",
                self.node_name,
                result.creates,
                result.updates,
                result.deletes,
            )
        return result, errors

    def _forget(self, keep: set[PoolKey]) -> None:
        """Drop the memory of pools and slices that are no longer desired."""
        for key in self._pools.keys() - keep:
            del self._pools[key]
        for key in self._wanted.keys() - keep:
            del self._wanted[key]
        for name in self._written.keys() - self._expected:
            del self._written[name]
        for name in self._dropped.keys() - self._expected:
            del self._dropped[name]
        for name in self._dropped_names.keys() - self._expected:
            del self._dropped_names[name]

    def _delete_all(self, slices: Iterable[dict[str, Any]]) -> None:
        for s in sorted(slices, key=name_of):
            self._delete(s)

    def _choose_generation(
        self, key: PoolKey, rendered0: list[dict[str, Any]], observed: list[dict[str, Any]]
    ) -> int:
        """Keep the pool's generation unless its content changed; then bump it."""
        state = self._pools.get(key)
        g_obs = max((generation_of(s) for s in observed), default=-1)
        base = max(g_obs, state.generation if state else -1)
        if state is not None:
            changed = state.rendered is not rendered0 and state.rendered != rendered0
        else:  # adopt what a predecessor published if it is what we want
            changed = bool(observed) and not self._pool_matches(rendered0, observed)
        generation = base + 1 if changed else max(base, 0)
        if changed:
            logger.info(
                "pool %s/%s changed: generation %d -> %d (%d slice(s))",
                key[0],
                key[1],
                base,
                generation,
                len(rendered0),
            )
        # Remember the decision before writing: if the writes fail half-way, the next round
        # finishes the same generation instead of bumping again.
        self._pools[key] = _PoolState(generation=generation, rendered=rendered0)
        return generation

    def _sync_pool(
        self,
        key: PoolKey,
        rendered0: list[dict[str, Any]],
        observed: list[dict[str, Any]],
        by_name: Mapping[str, dict[str, Any]],
        uid: str,
    ) -> None:
        generation = self._choose_generation(key, rendered0, observed)
        cached = self._wanted.get(key)
        if not (
            cached is not None
            and cached.rendered is rendered0
            and cached.generation == generation
            and cached.uid == uid
        ):
            objects = [self._desired_object(o, generation, uid) for o in rendered0]
            cached = _Wanted(rendered0, generation, uid, [(o, fingerprint(o)) for o in objects])
            self._wanted[key] = cached
        wanted = cached.objects
        names = {name_of(o) for o, _ in wanted}
        # 1. obsolete slices of this pool first (with a UID precondition)
        self._delete_all(s for s in observed if name_of(s) not in names)
        # 2. update what differs, 3. create what is missing
        missing: list[dict[str, Any]] = []
        dropped: list[DroppedFieldsError] = []
        for obj, fp in wanted:
            current = by_name.get(name_of(obj))
            if current is not None and (
                pool_key(current) != key or current["spec"].get("nodeName") != self.node_name
            ):
                self._delete(current)  # immutable fields differ: replace it
                current = None
            if current is None:
                missing.append(obj)
            elif not self._is_current(obj, fp, current):
                self._collect(dropped, self._update, obj, current)
        if missing:
            fresh_uid = self._owner_uid(refresh=True)
            for obj in missing:  # a copy: the cached object keeps the owner it was made for
                meta = {**obj["metadata"], "ownerReferences": self._owner_refs(fresh_uid)}
                self._collect(dropped, self._create, {**obj, "metadata": meta})
        if dropped:
            raise dropped[0]

    @staticmethod
    def _collect(
        into: list[DroppedFieldsError], write: Callable[..., None], *args: dict[str, Any]
    ) -> None:
        try:
            write(*args)
        except DroppedFieldsError as exc:
            into.append(exc)

    def _pool_matches(
        self, rendered0: list[dict[str, Any]], observed: list[dict[str, Any]]
    ) -> bool:
        """Whether the observed pool carries the desired content (any single generation)."""
        if len(observed) != len(rendered0) or len({generation_of(s) for s in observed}) != 1:
            return False
        by_name = {name_of(s): s for s in observed}
        for obj in rendered0:
            cur = by_name.get(name_of(obj))
            if cur is None:
                return False
            want = copy.deepcopy(obj["spec"])
            want["pool"]["generation"] = generation_of(cur)
            if not semantically_equal(want, cur.get("spec", {})):
                return False
        return True

    def _owner_refs(self, uid: str) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": uid,
                "controller": True,
            }
        ]

    def _desired_object(
        self, rendered: Mapping[str, Any], generation: int, uid: str
    ) -> dict[str, Any]:
        # new dicts only on the paths to the two fields set here; the rest is shared with
        # ``rendered``, which is kept for the next round. Neither is changed in place after:
        # the writes copy what they add (``_create`` the metadata, ``_update`` the object)
        spec = rendered["spec"]
        return {
            **rendered,
            "metadata": {**rendered["metadata"], "ownerReferences": self._owner_refs(uid)},
            "spec": {**spec, "pool": {**spec["pool"], "generation": generation}},
        }

    def _has_owner(self, observed: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
        refs = observed.get("metadata", {}).get("ownerReferences") or []
        return any(
            r.get("kind") == want["kind"]
            and r.get("uid") == want["uid"]
            and r.get("name") == want["name"]
            and bool(r.get("controller"))
            for r in refs
        )

    def _is_current(self, obj: dict[str, Any], fp: str, observed: Mapping[str, Any]) -> bool:
        name = name_of(obj)
        rec = self._written.get(name)
        if (
            rec is not None
            and rec.fingerprint == fp
            and rec.resource_version == resource_version(observed)
        ):
            return True
        if semantically_equal(obj["spec"], observed.get("spec", {})) and self._has_owner(
            observed, obj["metadata"]["ownerReferences"][0]
        ):
            self._written[name] = _Written(fp, resource_version(observed))
            return True
        return False

    # ---------------------------------------------------------------- writes

    def _check_written(
        self, name: str, fp: str, sent: Mapping[str, Any], got: Mapping[str, Any]
    ) -> None:
        self._written[name] = _Written(
            fp, resource_version(got)
        )  # adopt what came back: no rewrite loop
        paths = dropped_fields(sent.get("spec", {}), got.get("spec", {}))
        if not paths:
            self._dropped.pop(name, None)
            self._dropped_names.pop(name, None)
            return
        exc = DroppedFieldsError(name, paths)
        message = str(exc)
        self._dropped[name] = message
        names = (
            str(sent.get("spec", {}).get("driver", "")),
            frozenset(re.sub(r"\[\d+\]", "", p).rsplit(".", 1)[-1] for p in paths),
        )
        if self._dropped_names.get(name) != names:
            self._dropped_names[name] = names
            # backends that react to dropped fields (PluginContext.dropped_fields) need a
            # rediscovery to publish without them
            self.trigger(rediscover=True)
        if message not in self._reported:
            self._reported.add(message)
            logger.error("%s", message)
            self._event("DroppedFields", message)
        raise exc

    def _create(self, obj: dict[str, Any]) -> None:
        name = name_of(obj)
        fp = fingerprint(obj)
        try:
            got = self._kube.create_resource_slice(obj)
        except ConflictError:
            self._notify("changed")  # our view was stale: look again right away
            raise
        self.writes.creates += 1
        logger.debug("created ResourceSlice %s", name)
        self._check_written(name, fp, obj, got)

    def _update(self, obj: dict[str, Any], current: Mapping[str, Any]) -> None:
        name = name_of(obj)
        fp = fingerprint(obj)
        body = copy.deepcopy(obj)
        meta = copy.deepcopy(dict(current.get("metadata", {})))
        meta.pop("managedFields", None)
        others = [
            r
            for r in meta.get("ownerReferences") or []
            if not (r.get("kind") == "Node" and r.get("apiVersion") == "v1")
        ]
        meta["ownerReferences"] = obj["metadata"]["ownerReferences"] + others
        body["metadata"] = meta
        keep_time_added(body["spec"], current.get("spec", {}))
        try:
            got = self._kube.update_resource_slice(body)
        except (ConflictError, NotFoundError):  # changed or deleted since the LIST
            self._notify("changed")
            raise
        self.writes.updates += 1
        logger.debug("updated ResourceSlice %s", name)
        self._check_written(name, fp, obj, got)

    def _delete(self, observed: Mapping[str, Any]) -> None:
        name = name_of(observed)
        if name in self._deleted:
            return
        uid = observed.get("metadata", {}).get("uid")
        try:
            self._kube.delete_resource_slice(name, uid=uid)
        except ConflictError:
            logger.debug("ResourceSlice %s was replaced meanwhile; looking again", name)
            self._notify("changed")
            raise
        self.writes.deletes += 1
        self._deleted.add(name)
        self._written.pop(name, None)
        logger.debug("deleted ResourceSlice %s", name)

    # ------------------------------------------------------------ wake-ups

    def _notify(self, reason: str) -> None:
        with self._cond:
            self._pending.add(reason)
            self._cond.notify_all()

    def _notify_on_stop(self, stop_event: threading.Event) -> None:
        stop_event.wait()
        self._notify("stop")

    def _wait(self, timeout: float, accept: set[str]) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hit = self._pending & accept
                if hit:
                    self._pending -= hit - {"stop"}
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _unexpected(self, etype: str, obj: Mapping[str, Any]) -> bool:
        """Whether a watch event is someone else's doing (and needs a resync)."""
        if etype not in {"ADDED", "MODIFIED", "DELETED"}:
            return False
        if obj.get("spec", {}).get("driver") not in self.drivers:
            return False
        name = name_of(obj)
        if etype == "DELETED":
            return name in self._expected
        rec = self._written.get(name)
        return rec is None or rec.resource_version != resource_version(obj)

    def watch_retry_delay(self, failures: int) -> float:
        """Seconds to wait before reconnecting the watch after ``failures`` failures in a row.

        The watch is the cheap probe that notices the API server is back (and cuts the
        publisher's longer backoff short), so it retries at most every ``WATCH_RETRY_MAX``
        seconds; the wait is spread over 10-100 % of the step so that a fleet's watches, broken
        together, do not come back together.
        """
        cap = min(self.backoff_max, WATCH_RETRY_MAX)
        step = min(cap, self.backoff_initial * 2.0 ** min(failures - 1, 30))
        return step * self._rng.uniform(0.1, 1.0)

    def _watch_loop(self, stop_event: threading.Event) -> None:
        failures = 0

        def connected() -> None:
            nonlocal failures
            if failures:
                logger.info("watch on ResourceSlices of node %s re-established", self.node_name)
                self._notify("reconnected")
            failures = 0

        while not stop_event.is_set():
            try:
                for etype, obj in self._kube.watch_resource_slices(
                    self.node_name, stop_event, self.watch_timeout, on_connect=connected
                ):
                    if self._unexpected(etype, obj):
                        logger.debug(
                            "ResourceSlice %s %s by someone else; resyncing",
                            name_of(obj),
                            etype.lower(),
                        )
                        self._notify("changed")
            except DrakitError as exc:
                failures += 1
                delay = self.watch_retry_delay(failures)
                logger.debug("ResourceSlice watch failed (retry in %.1fs): %s", delay, exc)
                stop_event.wait(delay)
            except Exception:
                failures += 1
                logger.exception("ResourceSlice watch failed unexpectedly")
                stop_event.wait(min(self.backoff_max, WATCH_RETRY_MAX))
