"""An NRI plugin over a runtime's NRI socket: registration, the ttrpc server and client, events.

Subclass :class:`Handlers` and override the events you want; :class:`Plugin` subscribes to exactly
those (the event mask is derived from the overridden methods, as NRI's Go stub does), registers
with the runtime, answers ``Configure`` and ``Synchronize``, and calls your methods. Each call gets
the request message of NRI's ``api.proto`` and returns its response message.

Threads: one reads the socket; one calls the handlers, one request at a time, in the order the
runtime sent them (the runtime waits for each answer anyway). :meth:`Plugin.run` reconnects with
back-off when the runtime goes away.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from google.protobuf.message import DecodeError, Message

from ._proto import api_pb2 as api
from ._proto import ttrpc_pb2 as ttrpc
from .wire import (
    PLUGIN_CONN,
    RUNTIME_CONN,
    Frame,
    FrameDecoder,
    MessageType,
    MuxDecoder,
    WireError,
    encode_frame,
    mux_frames,
)

log = logging.getLogger(__name__)

DEFAULT_SOCKET: Final = Path("/var/run/nri/nri.sock")
PLUGIN_SERVICE: Final = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE: Final = "nri.pkg.api.v1alpha1.Runtime"
NRI_VERSION: Final = "v0.12.3"
# gRPC status codes ttrpc uses.
OK, UNKNOWN, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED = 0, 2, 3, 8, 12

_NAME = re.compile(r"^[a-zA-Z0-9_.+-]+$")
_INDEX = re.compile(r"^[0-9]{2}$")


class NRIError(Exception):
    """An NRI call failed, or the connection to the runtime did."""


class ClosedError(NRIError):
    """The connection to the runtime is closed."""


class Handlers:
    """The plugin's event handlers: override those you want (each subscribes to its event).

    ``configure`` and ``synchronize`` are always called; the rest only when overridden. A handler
    that raises fails the runtime's request (the pod or container operation fails).
    """

    def configure(self, request: api.ConfigureRequest) -> None:
        """The runtime configured the plugin (its name, version and timeouts in ``request``)."""

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        """Every existing pod and container, once per connection; return updates to apply."""
        return []

    def shutdown(self) -> None:
        """The runtime is shutting the plugin down."""

    def run_pod_sandbox(self, request: api.RunPodSandboxRequest) -> None:
        """A pod sandbox is being created."""

    def stop_pod_sandbox(self, request: api.StopPodSandboxRequest) -> None:
        """A pod sandbox is stopping."""

    def remove_pod_sandbox(self, request: api.RemovePodSandboxRequest) -> None:
        """A pod sandbox was removed."""

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        """A container is being created: adjust it, update or evict others."""
        return api.CreateContainerResponse()

    def post_create_container(self, request: api.PostCreateContainerRequest) -> None:
        """A container was created."""

    def start_container(self, request: api.StartContainerRequest) -> None:
        """A container is starting."""

    def post_start_container(self, request: api.PostStartContainerRequest) -> None:
        """A container started."""

    def update_container(self, request: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        """A container's resources are being updated."""
        return api.UpdateContainerResponse()

    def post_update_container(self, request: api.PostUpdateContainerRequest) -> None:
        """A container's resources were updated."""

    def stop_container(self, request: api.StopContainerRequest) -> api.StopContainerResponse:
        """A container is stopping: update others."""
        return api.StopContainerResponse()

    def remove_container(self, request: api.RemoveContainerRequest) -> None:
        """A container was removed."""


@dataclass(frozen=True)
class _Event:
    handler: str
    request: type[Message]
    response: type[Message]
    event: int  # api.Event value: mask bit 1 << (event - 1)
    has_container: bool


# Plugin-service methods that map to an event handler, as the v0.12 runtime calls them.
_EVENTS: Final[dict[str, _Event]] = {
    "RunPodSandbox": _Event(
        "run_pod_sandbox",
        api.RunPodSandboxRequest,
        api.RunPodSandboxResponse,
        api.RUN_POD_SANDBOX,
        has_container=False,
    ),
    "StopPodSandbox": _Event(
        "stop_pod_sandbox",
        api.StopPodSandboxRequest,
        api.StopPodSandboxResponse,
        api.STOP_POD_SANDBOX,
        has_container=False,
    ),
    "RemovePodSandbox": _Event(
        "remove_pod_sandbox",
        api.RemovePodSandboxRequest,
        api.RemovePodSandboxResponse,
        api.REMOVE_POD_SANDBOX,
        has_container=False,
    ),
    "CreateContainer": _Event(
        "create_container",
        api.CreateContainerRequest,
        api.CreateContainerResponse,
        api.CREATE_CONTAINER,
        has_container=True,
    ),
    "PostCreateContainer": _Event(
        "post_create_container",
        api.PostCreateContainerRequest,
        api.PostCreateContainerResponse,
        api.POST_CREATE_CONTAINER,
        has_container=True,
    ),
    "StartContainer": _Event(
        "start_container",
        api.StartContainerRequest,
        api.StartContainerResponse,
        api.START_CONTAINER,
        has_container=True,
    ),
    "PostStartContainer": _Event(
        "post_start_container",
        api.PostStartContainerRequest,
        api.PostStartContainerResponse,
        api.POST_START_CONTAINER,
        has_container=True,
    ),
    "UpdateContainer": _Event(
        "update_container",
        api.UpdateContainerRequest,
        api.UpdateContainerResponse,
        api.UPDATE_CONTAINER,
        has_container=True,
    ),
    "PostUpdateContainer": _Event(
        "post_update_container",
        api.PostUpdateContainerRequest,
        api.PostUpdateContainerResponse,
        api.POST_UPDATE_CONTAINER,
        has_container=True,
    ),
    "StopContainer": _Event(
        "stop_container",
        api.StopContainerRequest,
        api.StopContainerResponse,
        api.STOP_CONTAINER,
        has_container=True,
    ),
    "RemoveContainer": _Event(
        "remove_container",
        api.RemoveContainerRequest,
        api.RemoveContainerResponse,
        api.REMOVE_CONTAINER,
        has_container=True,
    ),
}
_BY_EVENT: Final = {e.event: name for name, e in _EVENTS.items()}


def event_mask(handlers: Handlers) -> int:
    """The event mask that subscribes to exactly the events ``handlers`` overrides.

    Raises:
        ValueError: It overrides none (an empty mask would mean *every* event to the runtime).
    """
    mask = 0
    for event in _EVENTS.values():
        if getattr(type(handlers), event.handler) is not getattr(Handlers, event.handler):
            mask |= 1 << (event.event - 1)
    if mask == 0:
        raise ValueError(
            f"{type(handlers).__name__} overrides no event handler (create_container, ...): "
            "NRI reads an empty mask as every event; override at least one"
        )
    return mask


def check_registration(name: str, index: str) -> None:
    """Check a plugin name and index as the runtime will.

    Raises:
        ValueError: Naming the field and the rule.
    """
    if not _NAME.match(name):
        raise ValueError(f"plugin name {name!r}: use only letters, digits and _.+- (not empty)")
    if not _INDEX.match(index):
        raise ValueError(f"plugin index {index!r}: use exactly two digits, e.g. '10'")


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    response: ttrpc.Response | None = None
    error: Exception | None = None


class Connection:
    """One connection to the runtime: the mux, the ttrpc server on conn 1, the client on conn 2.

    Args:
        sock: A connected unix stream socket.
        serve: Called on the worker thread for each Plugin-service request: ``(method, payload)``
            to the response message; raise :class:`NRIError` subclasses or anything else to
            answer with an error status.
    """

    def __init__(self, sock: socket.socket, serve: Callable[[str, bytes], Message]) -> None:
        self._sock = sock
        self._serve = serve
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next_sid = 1
        self._last_server_sid = 0
        self._requests: queue.Queue[Frame | None] = queue.Queue()
        self._closed = threading.Event()
        self.close_reason: str = ""
        self._reader = threading.Thread(target=self._read_loop, name="nri-reader", daemon=True)
        self._worker = threading.Thread(target=self._work_loop, name="nri-worker", daemon=True)

    def start(self) -> None:
        """Start reading and serving."""
        self._reader.start()
        self._worker.start()

    @property
    def closed(self) -> threading.Event:
        """Set once the connection is closed, by either side."""
        return self._closed

    def close(self, reason: str = "closed by the plugin") -> None:
        """Close the socket; pending calls fail with :class:`ClosedError`."""
        with self._state_lock:
            if self._closed.is_set():
                return
            self.close_reason = reason
            self._closed.set()
            pending, self._pending = self._pending, {}
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for call in pending.values():
            call.error = ClosedError(f"NRI connection closed: {reason}")
            call.done.set()
        self._requests.put(None)

    def call(self, method: str, request: Message, response: Message, timeout: float) -> None:
        """Call ``Runtime.<method>`` on conn 2 and parse the reply into ``response``.

        Raises:
            NRIError: The runtime answered with an error status, or no answer in ``timeout``.
            ClosedError: The connection closed first.
        """
        envelope = ttrpc.Request(
            service=RUNTIME_SERVICE,
            method=method,
            payload=request.SerializeToString(),
            timeout_nano=int(timeout * 1e9),
        )
        call = _Pending()
        with self._state_lock:
            if self._closed.is_set():
                raise ClosedError(f"NRI connection closed: {self.close_reason}")
            sid = self._next_sid
            self._next_sid += 2
            self._pending[sid] = call
        self._send(
            RUNTIME_CONN, encode_frame(sid, MessageType.REQUEST, envelope.SerializeToString())
        )
        if not call.done.wait(timeout):
            with self._state_lock:
                self._pending.pop(sid, None)
            raise NRIError(f"{RUNTIME_SERVICE}/{method}: no answer in {timeout:g}s")
        if call.error is not None:
            raise call.error
        assert call.response is not None  # noqa: S101 - set with done unless error is
        if call.response.status.code != OK:
            status = call.response.status
            raise NRIError(f"{RUNTIME_SERVICE}/{method}: code {status.code}: {status.message}")
        response.ParseFromString(call.response.payload)

    # ----------------------------------------------------------------------------- internals

    def _send(self, conn_id: int, frame: bytes) -> None:
        with self._write_lock:
            try:
                self._sock.sendall(mux_frames(conn_id, frame))
            except OSError as exc:
                self.close(f"write failed: {exc}")
                raise ClosedError(f"NRI connection closed: {exc}") from exc

    def _read_loop(self) -> None:
        mux = MuxDecoder()
        streams = {PLUGIN_CONN: FrameDecoder(), RUNTIME_CONN: FrameDecoder()}
        reason = "the runtime closed the connection"
        try:
            while True:
                data = self._sock.recv(1 << 16)
                if not data:
                    mux.close()
                    for stream in streams.values():
                        stream.close()
                    break
                for conn_id, payload in mux.feed(data):
                    decoder = streams.get(conn_id)
                    if decoder is None:  # the Go mux drops frames of connections not open
                        log.debug(
                            "NRI: dropped %d bytes for mux connection %d", len(payload), conn_id
                        )
                        continue
                    for frame in decoder.feed(payload):
                        self._dispatch(conn_id, frame)
        except WireError as exc:
            reason = f"protocol error: {exc}"
        except OSError as exc:
            reason = f"read failed: {exc}"
        if not self._closed.is_set():
            log.info("NRI: %s", reason)
        self.close(reason)

    def _dispatch(self, conn_id: int, frame: Frame) -> None:
        if conn_id == PLUGIN_CONN:
            self._requests.put(frame)
            return
        if frame.type != MessageType.RESPONSE:
            raise WireError(f"runtime sent message type {frame.type} on the client connection")
        with self._state_lock:
            call = self._pending.pop(frame.stream_id, None)
        if call is None:
            log.debug("NRI: response for unknown stream %d dropped", frame.stream_id)
            return
        if frame.oversized:
            call.error = NRIError(f"response of {frame.length} bytes over the ttrpc limit")
        else:
            try:
                call.response = ttrpc.Response.FromString(frame.data)
            except DecodeError as exc:
                call.error = NRIError(f"undecodable ttrpc response: {exc}")
        call.done.set()

    def _work_loop(self) -> None:
        while (frame := self._requests.get()) is not None:
            response = self._answer(frame)
            if response is None:
                continue
            data = encode_frame(frame.stream_id, MessageType.RESPONSE, response.SerializeToString())
            try:
                self._send(PLUGIN_CONN, data)
            except ClosedError:
                return

    def _answer(self, frame: Frame) -> ttrpc.Response | None:  # noqa: PLR0911 - one per status
        if frame.type != MessageType.REQUEST:
            log.debug("NRI: ignored message type %d on stream %d", frame.type, frame.stream_id)
            return None
        if frame.stream_id % 2 == 0:
            return _error(INVALID_ARGUMENT, "StreamID must be odd for client initiated streams")
        if frame.stream_id <= self._last_server_sid:
            return _error(INVALID_ARGUMENT, "StreamID cannot be re-used and must increment")
        self._last_server_sid = frame.stream_id
        if frame.oversized:
            return _error(
                RESOURCE_EXHAUSTED, f"message length {frame.length} exceed maximum message size"
            )
        try:
            request = ttrpc.Request.FromString(frame.data)
        except DecodeError as exc:
            return _error(INVALID_ARGUMENT, f"undecodable ttrpc request: {exc}")
        if request.service != PLUGIN_SERVICE:
            return _error(UNIMPLEMENTED, f"service {request.service}")
        try:
            reply = self._serve(request.method, request.payload)
        except _Unimplemented:
            return _error(UNIMPLEMENTED, f"method {request.method}")
        except Exception as exc:  # noqa: BLE001 - any handler failure becomes the call's status
            log.warning("NRI: %s failed: %s", request.method, exc)
            return _error(UNKNOWN, f"{type(exc).__name__}: {exc}")
        return ttrpc.Response(payload=reply.SerializeToString())


class _Unimplemented(Exception):
    pass


def _error(code: int, message: str) -> ttrpc.Response:
    return ttrpc.Response(status=ttrpc.Status(code=code, message=message))


class Plugin:
    """An external NRI plugin.

    Args:
        handlers: The event handlers; their overridden methods make the subscription.
        name: The plugin's name (``[a-zA-Z0-9_.+-]+``).
        index: Its two-digit index; the runtime calls plugins in ascending index order.
        socket_path: The runtime's NRI socket.
        register_timeout: Seconds to wait for RegisterPlugin's answer (the runtime gives 5 s).
    """

    def __init__(
        self,
        handlers: Handlers,
        *,
        name: str,
        index: str,
        socket_path: Path = DEFAULT_SOCKET,
        register_timeout: float = 5.0,
    ) -> None:
        check_registration(name, index)
        self.handlers = handlers
        self.name = name
        self.index = index
        self.socket_path = socket_path
        self.events = event_mask(handlers)
        self.register_timeout = register_timeout
        self.synchronized = threading.Event()
        self.runtime: tuple[str, str] | None = None
        self._conn: Connection | None = None
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []
        self._stopping = threading.Event()

    @property
    def connected(self) -> bool:
        """Registered and still connected."""
        conn = self._conn
        return conn is not None and not conn.closed.is_set()

    def connect(self) -> Connection:
        """Connect, register and return the connection (events flow once it synchronized).

        Raises:
            NRIError: No socket, refused, or registration failed.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.socket_path))
        except OSError as exc:
            sock.close()
            raise NRIError(f"cannot connect to the NRI socket {self.socket_path}: {exc}") from exc
        self.synchronized.clear()
        self._sync_pods, self._sync_containers = [], []
        conn = Connection(sock, self._serve)
        self._conn = conn
        conn.start()
        try:
            conn.call(
                "RegisterPlugin",
                api.RegisterPluginRequest(
                    plugin_name=self.name, plugin_idx=self.index, NRI_version=NRI_VERSION
                ),
                api.Empty(),
                self.register_timeout,
            )
        except NRIError:
            conn.close("registration failed")
            raise
        log.info("NRI: registered as %s-%s on %s", self.index, self.name, self.socket_path)
        return conn

    def update_containers(
        self,
        updates: list[api.ContainerUpdate],
        evictions: list[api.ContainerEviction] | None = None,
        *,
        timeout: float = 2.0,
    ) -> list[api.ContainerUpdate]:
        """Ask the runtime, unsolicited, to update (or evict) containers; return those that failed.

        Runtimes with NRI before v0.12.1 can deadlock on this (containerd#13733); containerd
        v2.4.2 embeds v0.12.3.

        Raises:
            ClosedError: Not connected.
            NRIError: The runtime refused the call or did not answer in ``timeout``.
        """
        conn = self._conn
        if conn is None:
            raise ClosedError("NRI: not connected")
        response = api.UpdateContainersResponse()
        conn.call(
            "UpdateContainers",
            api.UpdateContainersRequest(update=updates, evict=evictions or []),
            response,
            timeout,
        )
        return list(response.failed)

    def close(self) -> None:
        """Close the connection (the runtime drops the plugin)."""
        conn = self._conn
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        """Make :meth:`run` return, and close the connection."""
        self._stopping.set()
        self.close()

    def run(self, *, backoff: float = 1.0, max_backoff: float = 30.0) -> None:
        """Stay connected until :meth:`stop`: reconnect with exponential back-off.

        The back-off restarts from ``backoff`` after a connection that synchronized.
        """
        delay = backoff
        while not self._stopping.is_set():
            try:
                conn = self.connect()
            except NRIError as exc:
                log.info("NRI: %s; retrying in %.1fs", exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, max_backoff)
                continue
            conn.closed.wait()
            if self._stopping.is_set():
                break
            if self.synchronized.is_set():
                delay = backoff
            log.info("NRI: disconnected (%s); reconnecting in %.1fs", conn.close_reason, delay)
            self._stopping.wait(delay)
            delay = min(delay * 2, max_backoff)

    # ---------------------------------------------------------------------------- serving

    def _serve(self, method: str, payload: bytes) -> Message:
        if method == "Configure":
            configure = api.ConfigureRequest.FromString(payload)
            self.runtime = (configure.runtime_name, configure.runtime_version)
            self.handlers.configure(configure)
            return api.ConfigureResponse(events=self.events)
        if method == "Synchronize":
            return self._synchronize(api.SynchronizeRequest.FromString(payload))
        if method == "Shutdown":
            self.handlers.shutdown()
            return api.Empty()
        if method == "StateChange":
            return self._state_change(api.StateChangeEvent.FromString(payload))
        event = _EVENTS.get(method)
        if event is None or not self.events & (1 << (event.event - 1)):
            raise _Unimplemented(method)
        return self._call(event, event.request.FromString(payload))

    def _call(self, event: _Event, request: Message) -> Message:
        result: Any = getattr(self.handlers, event.handler)(request)
        if result is None:
            return event.response()
        if not isinstance(result, event.response):
            raise TypeError(
                f"{event.handler} returned {type(result).__name__}, "
                f"expected {event.response.__name__} or None"
            )
        return result

    def _synchronize(self, request: api.SynchronizeRequest) -> api.SynchronizeResponse:
        self._sync_pods += request.pods
        self._sync_containers += request.containers
        if request.more:  # a split sync: answer each partial chunk with more=true, no updates
            return api.SynchronizeResponse(more=True)
        pods, containers = self._sync_pods, self._sync_containers
        self._sync_pods, self._sync_containers = [], []
        updates = self.handlers.synchronize(pods, containers)
        self.synchronized.set()
        log.info("NRI: synchronized (%d pods, %d containers)", len(pods), len(containers))
        return api.SynchronizeResponse(update=updates)

    def _state_change(self, change: api.StateChangeEvent) -> api.Empty:
        # Runtimes before NRI v0.12 (and v0.12 for a plugin that answers Unimplemented) send
        # pod events and "post" events this way.
        name = _BY_EVENT.get(change.event)
        if name is None or not self.events & (1 << (change.event - 1)):
            return api.Empty()
        event = _EVENTS[name]
        if event.has_container:
            request = event.request(pod=change.pod, container=change.container)
        else:
            request = event.request(pod=change.pod)
        self._call(event, request)
        return api.Empty()
