"""The DRA resource health service (``DRAResourceHealth.NodeWatchResources``, v1alpha1 and v1).

The kubelet opens one server-streaming call per plugin instance and treats every message as the
complete device list of the driver. A device that is not refreshed within its timeout (30 s by
default) reads as Unknown, so a stream sends the list on connect, on every change, and again
every ``interval`` seconds.

Device health comes from a :class:`HealthSource`; :class:`HealthBroadcaster` is the ready-made
one that a health monitor feeds with :meth:`HealthBroadcaster.update`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import grpc

from drakit.kubelet._proto import health_v1_pb2 as v1
from drakit.kubelet._proto import health_v1_pb2_grpc as v1_grpc
from drakit.kubelet._proto import health_v1alpha1_pb2 as v1alpha1
from drakit.kubelet._proto import health_v1alpha1_pb2_grpc as v1alpha1_grpc
from drakit.models import DeviceHealth

__all__ = [
    "DEFAULT_HEALTH_INTERVAL",
    "MAX_HEALTH_MESSAGE",
    "DRAResourceHealthV1Servicer",
    "DRAResourceHealthV1alpha1Servicer",
    "HealthBroadcaster",
    "HealthSource",
    "HealthStreamer",
]

logger = logging.getLogger(__name__)

DEFAULT_HEALTH_INTERVAL = 25.0
"""Seconds between full resends; below the kubelet's 30 s default health timeout."""
MAX_HEALTH_MESSAGE = 1024
"""The kubelet truncates longer health messages; drakit truncates the same way before sending."""


@runtime_checkable
class HealthSource(Protocol):
    """Where the health service gets device health from."""

    def snapshot(self) -> Sequence[DeviceHealth]:
        """Return the current health of every device of the driver on this node."""
        ...

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (cheap, non-blocking, any thread) whenever the snapshot changes.

        Args:
            callback: Called without arguments after each change.

        Returns:
            A function that cancels the subscription.
        """
        ...


def _significant(devices: Iterable[DeviceHealth]) -> dict[tuple[str, str], tuple[str, str]]:
    return {(d.pool, d.device): (d.health, d.message) for d in devices}


class HealthBroadcaster:
    """A thread-safe :class:`HealthSource` that a health monitor pushes device health into.

    Args:
        devices: The initial device list.
    """

    def __init__(self, devices: Iterable[DeviceHealth] = ()) -> None:
        self._lock = threading.Lock()
        self._devices: tuple[DeviceHealth, ...] = tuple(devices)
        self._subscribers: dict[int, Callable[[], None]] = {}
        self._next_id = 0

    def snapshot(self) -> tuple[DeviceHealth, ...]:
        """Return the latest device list."""
        with self._lock:
            return self._devices

    def update(self, devices: Iterable[DeviceHealth]) -> bool:
        """Replace the device list and wake the streams if anything significant changed.

        A change is a device added or removed, or a different health or message; a new
        ``last_updated`` alone is stored but does not trigger a send (the periodic resend
        carries it).

        Args:
            devices: The complete current device list.

        Returns:
            Whether the list changed significantly.
        """
        new = tuple(devices)
        with self._lock:
            changed = _significant(new) != _significant(self._devices)
            self._devices = new
            callbacks = list(self._subscribers.values()) if changed else []
        for cb in callbacks:
            try:
                cb()
            except Exception:
                logger.exception("health subscriber callback failed")
        return changed

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after every significant change; returns the unsubscribe function."""
        with self._lock:
            key = self._next_id
            self._next_id += 1
            self._subscribers[key] = callback

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.pop(key, None)

        return unsubscribe


class HealthStreamer:
    """Version-neutral core of the health service: produces the device lists a stream sends.

    Args:
        source: Where device health comes from.
        interval: Seconds between full resends when nothing changes.
        max_streams: Concurrent streams allowed; each one holds a gRPC worker thread.
    """

    def __init__(
        self,
        source: HealthSource,
        *,
        interval: float = DEFAULT_HEALTH_INTERVAL,
        max_streams: int = 4,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"health resend interval must be positive, got {interval}")
        self._source = source
        self._interval = interval
        self._max_streams = max_streams
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._wakers: set[threading.Event] = set()

    @property
    def active_streams(self) -> int:
        """How many streams are open right now."""
        with self._lock:
            return len(self._wakers)

    def close(self) -> None:
        """End every open stream and refuse new ones (called when the server stops)."""
        with self._lock:
            self._closed.set()
            wakers = list(self._wakers)
        for w in wakers:
            w.set()

    def stream(self, context: grpc.ServicerContext, api: str) -> Iterator[Sequence[DeviceHealth]]:
        """Yield the full device list on connect, on each change and every ``interval`` seconds.

        Ends when the client goes away or :meth:`close` is called.

        Args:
            context: The call's context.
            api: The API version that was called, for log messages.

        Yields:
            The complete device list to send.
        """
        wake = threading.Event()
        with self._lock:
            if self._closed.is_set():
                context.abort(grpc.StatusCode.UNAVAILABLE, "server is stopping")
            if len(self._wakers) >= self._max_streams:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"at most {self._max_streams} health streams at a time",
                )
            self._wakers.add(wake)
        unsubscribe = self._source.subscribe(wake.set)
        context.add_callback(wake.set)  # the call ended: client cancelled or server stopped
        logger.info("health stream (%s) opened by %s", api, context.peer())
        try:
            while True:
                wake.clear()
                yield self._source.snapshot()
                wake.wait(self._interval)
                if self._closed.is_set() or not context.is_active():
                    return
        finally:
            unsubscribe()
            with self._lock:
                self._wakers.discard(wake)
            logger.info("health stream (%s) closed", api)


def _message(text: str) -> str:
    if len(text) <= MAX_HEALTH_MESSAGE:
        return text
    return text[: MAX_HEALTH_MESSAGE - 3] + "..."


_V1ALPHA1_STATUS = {
    "Healthy": v1alpha1.HEALTHY,
    "Unhealthy": v1alpha1.UNHEALTHY,
    "Unknown": v1alpha1.UNKNOWN,
}
_V1_STATUS = {"Healthy": v1.HEALTHY, "Unhealthy": v1.UNHEALTHY, "Unknown": v1.UNKNOWN}


def _wire_devices(
    pb: Any, status: Mapping[str, int], devices: Sequence[DeviceHealth], timeout: int
) -> list[Any]:
    """``DeviceHealth`` messages of one health API version (v1 and v1alpha1 are field-identical).

    Args:
        pb: the version's generated ``*_pb2`` module.
        status: health string -> that version's enum value.
        devices: what to send.
        timeout: ``health_check_timeout_seconds`` for every device.
    """
    return [
        pb.DeviceHealth(
            device=pb.DeviceIdentifier(pool_name=d.pool, device_name=d.device),
            health=status[d.health],
            last_updated_time=int(d.last_updated.timestamp()),
            health_check_timeout_seconds=timeout,
            message=_message(d.message),
        )
        for d in devices
    ]


class _ResourceHealthServicer:
    """``DRAResourceHealth`` of one API version (v1 and v1alpha1 differ only in their messages).

    Args:
        streamer: The shared, version-neutral implementation.
        timeout_seconds: ``health_check_timeout_seconds`` sent with each device; 0 means the
            kubelet default (30 s).
    """

    _api: ClassVar[str]
    _pb: ClassVar[Any]
    """The version's message module."""
    _status: ClassVar[Mapping[str, int]]
    """Health string -> the version's enum value."""

    def __init__(self, streamer: HealthStreamer, *, timeout_seconds: int = 0) -> None:
        self._streamer = streamer
        self._timeout = timeout_seconds

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """Stream the complete device health list."""
        pb = self._pb
        for devices in self._streamer.stream(context, self._api):
            yield pb.NodeWatchResourcesResponse(
                devices=_wire_devices(pb, self._status, devices, self._timeout)
            )


class DRAResourceHealthV1alpha1Servicer(
    _ResourceHealthServicer, v1alpha1_grpc.DRAResourceHealthServicer
):
    """``v1alpha1.DRAResourceHealth`` (kubelet 1.34+) on top of a :class:`HealthStreamer`."""

    _api: ClassVar[str] = "v1alpha1"
    _pb: ClassVar[Any] = v1alpha1
    _status: ClassVar[Mapping[str, int]] = _V1ALPHA1_STATUS


class DRAResourceHealthV1Servicer(_ResourceHealthServicer, v1_grpc.DRAResourceHealthServicer):
    """``v1.DRAResourceHealth`` (kubelet 1.37+) on top of a :class:`HealthStreamer`."""

    _api: ClassVar[str] = "v1"
    _pb: ClassVar[Any] = v1
    _status: ClassVar[Mapping[str, int]] = _V1_STATUS
