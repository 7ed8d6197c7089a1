"""Prometheus metrics and the ``/healthz`` / ``/readyz`` probes of ``drakit node``.

Names are vendor-neutral (``drakit_*``) and labelled by driver, so one dashboard serves every
backend:

==========================================  ==========  ================================
metric                                      type        labels
==========================================  ==========  ================================
``drakit_prepare_seconds``                  histogram   driver, result (success/error)
``drakit_unprepare_seconds``                histogram   driver, result
``drakit_devices_published``                gauge       driver
``drakit_slice_writes_total``               counter     op (create/update/delete)
``drakit_devices_rejected``                 gauge       driver
``drakit_checkpoint_repairs_total``         counter     driver
``drakit_plugin_errors_total``              counter     plugin, hook
``drakit_prepared_claims``                  gauge       driver
``drakit_skipped_items``                    gauge       driver, kind, reason
==========================================  ==========  ================================

``drakit_skipped_items``: the devices, Node labels and health watches a backend leaves out
while serving the rest (:class:`drakit.context.SkippedItems`); ``kind`` is device, label or
health, ``reason`` a fixed word per cause (at most 16 per backend), so the series stay few.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

__all__ = ["Metrics", "ProbeServer"]

log = logging.getLogger(__name__)

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _claim_seconds(op: str, registry: CollectorRegistry) -> Histogram:
    """``drakit_<op>_seconds``: the time to prepare or unprepare one claim, by driver and result."""
    return Histogram(
        f"drakit_{op}_seconds",
        f"Time to {op} one claim",
        ["driver", "result"],
        registry=registry,
        buckets=_BUCKETS,
    )


class Metrics:
    """drakit's metrics in a registry of their own (so tests and several nodes never clash)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.prepare_seconds = _claim_seconds("prepare", r)
        self.unprepare_seconds = _claim_seconds("unprepare", r)
        self._children: dict[tuple[str, str, str], Histogram] = {}
        self.devices_published = Gauge(
            "drakit_devices_published",
            "Devices in the desired ResourceSlices",
            ["driver"],
            registry=r,
        )
        self.checkpoint_repairs = Counter(
            "drakit_checkpoint_repairs_total",
            "Damaged checkpoints moved aside, claims rebuilt from their CDI specs, and claims "
            "re-prepared after a reboot",
            ["driver"],
            registry=r,
        )
        self.plugin_errors = Counter(
            "drakit_plugin_errors_total", "Hook calls that raised", ["plugin", "hook"], registry=r
        )
        self.slice_writes: Callable[[], Mapping[str, int]] = dict
        """Returns the publisher's write counts by op (create/update/delete); read on scrape."""
        self.devices_rejected: Callable[[], Mapping[str, int]] = dict
        """Returns, per driver, the devices left out of its slices (the API would reject them)."""
        self.prepared_claims: Callable[[], Mapping[str, int]] = dict
        """Returns the number of checkpointed claims per driver; read on scrape."""
        self.skipped_items: Callable[[], Mapping[tuple[str, str, str], int]] = dict
        """Returns ``(driver, kind, reason)`` -> items left out; read on scrape."""
        r.register(_Live(self))

    def observe(self, driver: str, op: str, result: str, seconds: float) -> None:
        """Record one prepare or unprepare (the pipeline's observer interface)."""
        key = (op, driver, result)
        child = self._children.get(key)
        if child is None:  # labels() takes a lock and builds its key on every call
            hist = self.prepare_seconds if op == "prepare" else self.unprepare_seconds
            child = self._children[key] = hist.labels(driver=driver, result=result)
        child.observe(seconds)

    def exposition(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)


_REJECTED_HELP = "Devices and counter sets left out of the ResourceSlices (the API rejects them)"
_SKIPPED_HELP = (
    "Devices, Node labels and health watches a backend leaves out (named in Node Events)"
)
_SKIPPED_LABELS = ["driver", "kind", "reason"]


class _Live(Collector):
    """Metrics whose values live elsewhere (publisher counts, checkpoints), read on scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        """Declare the families without reading the sources."""
        return [
            CounterMetricFamily("drakit_slice_writes", "ResourceSlice writes", labels=["op"]),
            GaugeMetricFamily(
                "drakit_prepared_claims", "Claims in the checkpoint", labels=["driver"]
            ),
            GaugeMetricFamily("drakit_devices_rejected", _REJECTED_HELP, labels=["driver"]),
            GaugeMetricFamily("drakit_skipped_items", _SKIPPED_HELP, labels=_SKIPPED_LABELS),
        ]

    def collect(self) -> Iterable[Metric]:
        """Read the current values."""
        writes = CounterMetricFamily(
            "drakit_slice_writes", "ResourceSlice writes to the API server", labels=["op"]
        )
        for op, n in sorted(self.metrics.slice_writes().items()):
            writes.add_metric([op], n)
        claims = GaugeMetricFamily(
            "drakit_prepared_claims", "Claims in the checkpoint", labels=["driver"]
        )
        for driver, n in sorted(self.metrics.prepared_claims().items()):
            claims.add_metric([driver], n)
        rejected = GaugeMetricFamily("drakit_devices_rejected", _REJECTED_HELP, labels=["driver"])
        for driver, n in sorted(self.metrics.devices_rejected().items()):
            rejected.add_metric([driver], n)
        skipped = GaugeMetricFamily("drakit_skipped_items", _SKIPPED_HELP, labels=_SKIPPED_LABELS)
        for key, n in sorted(self.metrics.skipped_items().items()):
            skipped.add_metric(list(key), n)
        return [writes, claims, rejected, skipped]


class ProbeServer:
    """Serves ``/metrics``, ``/healthz`` (alive) and ``/readyz`` (``ready()`` is true).

    Args:
        metrics: what ``/metrics`` shows.
        ready: returns ``(ready, reason)``; ``/readyz`` answers 503 with the reason otherwise.
        address: listen address.
        port: listen port (0 picks a free one; see :attr:`port`).
    """

    def __init__(
        self,
        metrics: Metrics,
        ready: Callable[[], tuple[bool, str]],
        *,
        address: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, outer.metrics.exposition(), CONTENT_TYPE_LATEST)
                elif self.path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif self.path == "/readyz":
                    ok, reason = outer.ready()
                    self._send(200 if ok else 503, f"{reason}\n".encode(), "text/plain")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("probe: " + format, *args)  # noqa: G003

        self.metrics = metrics
        self.ready = ready
        self._server = ThreadingHTTPServer((address, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="probes", daemon=True
        )

    @property
    def port(self) -> int:
        """The port actually listened on."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Start serving in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
