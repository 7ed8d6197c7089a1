"""The pipeline's networkData writer: retries, cancellation, dropping what cannot be written.

The sink stands in for the API server's claim status endpoint (the seam ``drakit.kube`` fills);
``tests/e2e/test_claim_device_status.py`` runs the same writer against the real API server.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from drakit.errors import RetryableError
from drakit.kube import ConflictError, NotFoundError
from drakit.prepare.device_status import StatusJob, StatusWriter


class Sink:
    """Fails the first ``fail`` applies with ``error``, then records them."""

    def __init__(self, fail: int = 0, error: Exception | None = None) -> None:
        self.fail = fail
        self.error = error or RetryableError("API server away")
        self.calls = 0
        self.applied: list[tuple[str, list[dict[str, Any]], str]] = []
        self.done = threading.Event()

    def apply_claim_device_status(
        self,
        namespace: str,
        name: str,
        uid: str,
        devices: list[dict[str, Any]],
        *,
        field_manager: str,
    ) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.fail:
            raise self.error
        self.applied.append((uid, devices, field_manager))
        self.done.set()
        return {}


def job(uid: str = "u1") -> StatusJob:
    entry = {"driver": "nic.example.com", "pool": "p", "device": "d", "networkData": {}}
    return StatusJob(namespace="ns", name="c", uid=uid, devices=(entry,))


def test_an_outage_and_a_conflict_are_retried_until_written() -> None:
    for error in (RetryableError("API server away"), ConflictError("conflict")):
        sink = Sink(fail=2, error=error)
        writer = StatusWriter(sink, "nic.example.com")
        try:
            writer.submit(job())
            assert sink.done.wait(10), "written after two failed attempts"
            assert sink.calls == 3
            [(uid, _, manager)] = sink.applied
            assert (uid, manager) == ("u1", "drakit/nic.example.com")
        finally:
            writer.close()


def test_unprepare_cancels_a_pending_retry_and_a_gone_claim_is_dropped() -> None:
    sink = Sink(fail=1)
    writer = StatusWriter(sink, "nic.example.com")
    try:
        writer.submit(job())
        deadline = time.monotonic() + 5
        while sink.calls < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        writer.cancel("u1")  # before the retry is due (0.2 s later)
        time.sleep(0.5)
        assert (sink.calls, sink.applied) == (1, [])
    finally:
        writer.close()
    gone = Sink(fail=1, error=NotFoundError("not found"))
    writer = StatusWriter(gone, "nic.example.com")
    try:
        writer.submit(job())
        time.sleep(0.5)
        assert (gone.calls, gone.applied) == (1, []), "a 404 is not retried"
    finally:
        writer.close()
