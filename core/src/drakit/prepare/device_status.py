"""Writing networkData to ``status.devices`` of prepared claims, off the kubelet's call.

Step 8 of the prepare pipeline (:mod:`drakit.prepare.pipeline`): when a plugin returned
``network_data``, the pipeline queues one server-side apply of this driver's ``status.devices``
entries on the writer's own thread, after the reply is built. The entries are derived from the
checkpoint (:func:`status_entries`), so a write lost in a crash is made again at the next start
(:meth:`drakit.prepare.pipeline.DriverState.resume_device_status`), and an apply that is
repeated changes nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from drakit.errors import ConflictError, DrakitError, NotFoundError, RetryableError
from drakit.prepare.checkpoint import ClaimRecord

__all__ = ["DeviceStatusSink", "StatusJob", "StatusWriter", "entry_key", "status_entries"]

log = logging.getLogger(__name__)


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


def entry_key(entry: Mapping[str, Any]) -> str:
    """One ``status.devices`` entry's identity and networkData, as canonical JSON."""
    keep = {k: entry[k] for k in ("pool", "device", "shareID", "networkData") if entry.get(k)}
    return json.dumps(keep, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class StatusJob:
    """One claim's ``status.devices`` entries to apply (this driver's, with networkData)."""

    namespace: str
    name: str
    uid: str
    devices: tuple[dict[str, Any], ...]


_STATUS_RETRY_S = (0.2, 1.0, 5.0, 15.0, 30.0)
"""Back-off between attempts of one networkData write; after the last the write is dropped."""


class StatusWriter:
    """Applies ``status.devices`` networkData on its own thread, newest job per claim.

    Jobs never block the kubelet's call. A failed apply (API server away, 5xx, a conflict) is
    retried after each of :data:`_STATUS_RETRY_S`; a claim that is gone (404) or was replaced
    (another UID) is dropped. Unprepare cancels a claim's pending job. What is not written when
    the process dies is written again at the next start
    (:meth:`~drakit.prepare.pipeline.DriverState.resume_device_status` applies every prepared
    claim's entries from the checkpoint).
    """

    def __init__(self, sink: DeviceStatusSink, driver: str) -> None:
        self._sink = sink
        self._driver = driver
        self._manager = f"drakit/{driver}"[:128]
        self._cond = threading.Condition()
        self._jobs: dict[str, tuple[StatusJob, int, float]] = {}  # uid -> job, attempt, due
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, job: StatusJob) -> None:
        """Queue ``job``, replacing the claim's pending one; starts the thread on first use."""
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
        """Drop the pending job of the claim ``uid`` (its unprepare came)."""
        with self._cond:
            self._jobs.pop(uid, None)

    def close(self) -> None:
        """Stop the thread (a job being applied finishes; pending ones are dropped)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _next(self) -> tuple[StatusJob, int] | None:
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


def status_entries(driver: str, rec: ClaimRecord) -> list[dict[str, Any]]:
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
