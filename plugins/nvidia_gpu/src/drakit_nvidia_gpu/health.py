"""GPU health from NVML events: an XID watcher on its own thread.

The watcher registers every GPU for ``nvmlEventTypeXidCriticalError`` and waits on the event
set (``nvmlEventSetWait``, one second at a time, GIL released in real NVML). A critical XID
(any XID not in ``ignored_xids``) marks the GPU and all its devices Unhealthy with a message;
``NVMLError_GpuIsLost`` marks the GPUs that no longer answer as fallen off the bus. The plugin
turns the state into health reports and into a device taint
(``gpu.nvidia.drakit.io/xid=<xid>`` or ``gpu.nvidia.drakit.io/gpu-lost``, effect by
configuration). A lost GPU is healthy again as soon as NVML answers for it again; an XID
clears ``health_clear_after`` seconds after the last one (never, by default).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from drakit.models import DeviceTaint
from drakit_nvidia_gpu.nvml import Nvml

__all__ = ["TAINT_LOST", "TAINT_XID", "GpuProblem", "XidWatcher", "problem_taints", "xid_message"]

TAINT_XID = "gpu.nvidia.drakit.io/xid"
TAINT_LOST = "gpu.nvidia.drakit.io/gpu-lost"

logger = logging.getLogger(__name__)

#: What the most common critical XIDs mean (NVIDIA's XID catalogue).
XID_MEANINGS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapper failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
_WAIT_MS = 1000
_BACKOFF_FIRST_S = 0.1
_BACKOFF_MAX_S = 30.0
_FAILURES_UNHEALTHY = 3
"""Failed waits in a row after which every watched GPU that does not answer is Unhealthy."""


def xid_message(xid: int) -> str:
    """``XID 79: GPU has fallen off the bus``."""
    meaning = XID_MEANINGS.get(xid)
    return (
        f"XID {xid}: {meaning}" if meaning else f"XID {xid}: critical error reported by the driver"
    )


@dataclass(frozen=True)
class GpuProblem:
    """Why a GPU is unhealthy."""

    kind: str  # "xid" or "lost"
    xid: int | None
    message: str
    since: float


class XidWatcher:
    """Watches NVML events on a daemon thread and keeps each GPU's problem, if any.

    Args:
        nvml: the seam.
        ignored: XIDs that leave a GPU healthy.
        clear_after: seconds after the last critical XID before the GPU is healthy again
            (``None``: never, until the process restarts).
        on_change: called (from the watcher thread) when a GPU's health changed.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        nvml: Nvml,
        *,
        ignored: Iterable[int],
        clear_after: float | None,
        on_change: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml = nvml
        self.ignored = frozenset(ignored)
        self.clear_after = clear_after
        self.on_change = on_change
        self.clock = clock
        self._lock = threading.Lock()
        self._problems: dict[str, GpuProblem] = {}
        self._uuids: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._es: Any = None
        self.unwatched: dict[str, str] = {}
        """GPU UUID -> why its XID events are not watched (it stays Healthy unless lost)."""
        self.failures = 0
        """Consecutive failed waits (reset by an event or a timeout); drives the back-off."""

    def start(self, uuids: list[str]) -> None:
        """Register the GPUs' events now (so nothing after this call is missed), then watch.

        A GPU NVML will not register (NotSupported, or any error for that GPU) is not watched,
        logged with the reason (:attr:`unwatched`); health watching that NVML cannot do at all
        is off, logged, never fatal: discovery and the other GPUs go on.
        """
        handles: dict[str, Any] = {}
        for u in uuids:
            try:
                handles[u] = self.nvml.handle(u)
            except self.nvml.error as e:
                self.unwatched[u] = f"no NVML handle: {e!r}"
        try:
            self._es, refused = self.nvml.event_set(handles)
        except self.nvml.error as e:
            self.unwatched.update(dict.fromkeys(uuids, f"NVML event set unavailable: {e!r}"))
            logger.warning("XID health watching is off for every GPU: %r", e)
            return
        self.unwatched.update(refused)
        for u, why in sorted(self.unwatched.items()):
            logger.warning("XID health watching is off for GPU %s: %s", u, why)
        self._uuids = [u for u in uuids if u not in self.unwatched]
        if not self._uuids:
            return
        self._thread = threading.Thread(target=self._run, name="nvidia-xid-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and free the event set."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def problems(self) -> dict[str, GpuProblem]:
        """GPU UUID -> its current problem (expired XIDs and recovered GPUs dropped)."""
        now = self.clock()
        changed = False
        with self._lock:
            for uuid, p in list(self._problems.items()):
                if p.kind == "lost" and self._answers(uuid):
                    logger.info("GPU %s answers NVML again; healthy", uuid)
                    del self._problems[uuid]
                    changed = True
                elif (
                    p.kind == "xid"
                    and self.clear_after is not None
                    and now - p.since >= self.clear_after
                ):
                    logger.info("GPU %s: no critical XID for %.0fs; healthy", uuid, now - p.since)
                    del self._problems[uuid]
                    changed = True
            out = dict(self._problems)
        if changed and self.on_change is not None:
            self.on_change()
        return out

    def _answers(self, uuid: str) -> bool:
        try:
            h = self.nvml.handle(uuid)
            self.nvml.pci_bus_id(h)
            self.nvml.memory(h)  # reaches the GPU itself (the bus ID may be cached)
        except self.nvml.error:
            return False
        return True

    def _set(self, uuid: str, problem: GpuProblem) -> None:
        with self._lock:
            old = self._problems.get(uuid)
            if old is not None and old.kind == problem.kind == "lost":
                return  # already known: no log or republish storm while it stays lost
            self._problems[uuid] = problem
        logger.warning("GPU %s is unhealthy: %s", uuid, problem.message)
        if self.on_change is not None:
            self.on_change()

    def handle_event(self, event: Any) -> None:
        """Apply one NVML event (public so the watcher's decisions are testable directly)."""
        xid = int(event.eventData)
        uuid = self.nvml.uuid(event.device)
        if xid in self.ignored:
            logger.info("GPU %s reported XID %d (ignored: application error)", uuid, xid)
            return
        self._set(uuid, GpuProblem("xid", xid, xid_message(xid), self.clock()))

    def _lost(self) -> None:
        for uuid in self._uuids:
            if not self._answers(uuid):
                self._set(
                    uuid, GpuProblem("lost", None, "GPU has fallen off the bus", self.clock())
                )

    def _backoff(self) -> float:
        """Seconds to wait after the ``failures``-th failed wait in a row (0.1 s doubling)."""
        return float(min(_BACKOFF_FIRST_S * 2 ** min(self.failures - 1, 16), _BACKOFF_MAX_S))

    def _run(self) -> None:
        es = self._es
        while not self._stop.is_set():
            try:
                event = self.nvml.wait(es, _WAIT_MS)
            except self.nvml.timeout:
                self.failures = 0
                continue
            except self.nvml.gpu_lost:
                self.failures += 1
                self._lost()
                self._stop.wait(self._backoff())  # NVML keeps saying so: never a busy loop
                continue
            except self.nvml.error:
                self.failures += 1
                delay = self._backoff()
                logger.exception("waiting for NVML events failed; retrying in %.1fs", delay)
                if self.failures >= _FAILURES_UNHEALTHY:
                    self._lost()
                self._stop.wait(delay)
                continue
            self.failures = 0
            try:
                self.handle_event(event)
            except self.nvml.error:
                logger.exception("could not attribute an NVML event to a GPU")
        try:
            self.nvml.free(es)
        except self.nvml.error:
            logger.debug("freeing the NVML event set failed", exc_info=True)


def problem_taints(
    problems: Mapping[str, GpuProblem], effect: Literal["NoSchedule", "NoExecute"]
) -> dict[str, tuple[DeviceTaint, ...]]:
    """GPU UUID -> the taint its problem puts on its devices (``gpu-lost`` or the XID)."""
    out: dict[str, tuple[DeviceTaint, ...]] = {}
    for uuid, p in problems.items():
        if p.kind == "lost":
            out[uuid] = (DeviceTaint(key=TAINT_LOST, value="true", effect=effect),)
        else:
            out[uuid] = (DeviceTaint(key=TAINT_XID, value=str(p.xid), effect=effect),)
    return out
