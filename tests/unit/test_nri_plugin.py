"""drakit.nri.Plugin against a stand-in runtime on a real unix socket.

The stand-in speaks the runtime's side of the wire (NRI's mux, ttrpc server on conn 2, ttrpc
client on conn 1) the way the Go adaptation does; the real containerd is in
tests/e2e/test_nri_real_node.py.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from drakit.nri import (
    ClosedError,
    Connection,
    Handlers,
    NRIError,
    Plugin,
    api,
    check_registration,
    event_mask,
)
from drakit.nri._proto import ttrpc_pb2 as ttrpc
from drakit.nri.wire import (
    Frame,
    FrameDecoder,
    MessageType,
    MuxDecoder,
    encode_frame,
    encode_mux,
    mux_frames,
)

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"


@dataclass
class Peer:
    """The runtime's end of one accepted connection."""

    sock: socket.socket
    mux: MuxDecoder = field(default_factory=MuxDecoder)
    streams: dict[int, FrameDecoder] = field(
        default_factory=lambda: {1: FrameDecoder(), 2: FrameDecoder()}
    )
    ready: dict[int, list[Frame]] = field(default_factory=lambda: {1: [], 2: []})
    next_sid: int = 1

    def read(self, conn: int) -> Frame:
        self.sock.settimeout(5)
        while not self.ready[conn]:
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("the plugin closed the connection")
            for cid, payload in self.mux.feed(data):
                self.ready[cid] += self.streams[cid].feed(payload)
        return self.ready[conn].pop(0)

    def reply(self, conn: int, sid: int, response: ttrpc.Response) -> None:
        frame = encode_frame(sid, MessageType.RESPONSE, response.SerializeToString())
        self.sock.sendall(mux_frames(conn, frame))

    def send_raw(self, conn: int, sid: int, request: ttrpc.Request) -> None:
        frame = encode_frame(sid, MessageType.REQUEST, request.SerializeToString())
        self.sock.sendall(encode_mux(conn, frame))

    def call(self, method: str, message: object, *, service: str = PLUGIN) -> ttrpc.Response:
        """Call the plugin's service on conn 1 with the next odd stream id; return the reply."""
        payload = message.SerializeToString()  # type: ignore[attr-defined]
        sid, self.next_sid = self.next_sid, self.next_sid + 2
        request = ttrpc.Request(
            service=service, method=method, payload=payload, timeout_nano=2 * 10**9
        )
        self.send_raw(1, sid, request)
        frame = self.read(1)
        assert (frame.stream_id, frame.type, frame.flags) == (sid, MessageType.RESPONSE, 0)
        return ttrpc.Response.FromString(frame.data)

    def accept_registration(self) -> api.RegisterPluginRequest:
        frame = self.read(2)
        assert (frame.stream_id, frame.type) == (1, MessageType.REQUEST)
        request = ttrpc.Request.FromString(frame.data)
        assert (request.service, request.method) == (
            "nri.pkg.api.v1alpha1.Runtime",
            "RegisterPlugin",
        )
        assert request.timeout_nano > 0
        self.reply(2, 1, ttrpc.Response())
        return api.RegisterPluginRequest.FromString(request.payload)

    def handshake(self, pods: int = 0) -> api.ConfigureResponse:
        self.accept_registration()
        configured = self.call("Configure", api.ConfigureRequest(runtime_name="fake"))
        sync = api.SynchronizeRequest(pods=[api.PodSandbox(id=f"p{i}") for i in range(pods)])
        assert self.call("Synchronize", sync).status.code == 0
        return api.ConfigureResponse.FromString(configured.payload)


@pytest.fixture
def runtime() -> Iterator[socket.socket]:
    # Short path: unix socket paths must stay below 108 bytes (pytest's tmp_path may not).
    with tempfile.TemporaryDirectory(prefix="nri-", dir="/tmp") as tmp:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(Path(tmp) / "nri.sock"))
        server.listen(4)
        server.settimeout(10)
        try:
            yield server
        finally:
            server.close()


def socket_path(server: socket.socket) -> Path:
    return Path(server.getsockname())


class Recorder(Handlers):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.synced: list[tuple[list[str], list[str]]] = []

    def configure(self, request: api.ConfigureRequest) -> None:
        self.calls.append(("configure", request.runtime_name))

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        self.synced.append(([p.id for p in pods], [c.id for c in containers]))
        return [api.ContainerUpdate(container_id=c.id) for c in containers]

    def run_pod_sandbox(self, request: api.RunPodSandboxRequest) -> None:
        self.calls.append(("run_pod_sandbox", request.pod.id))

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        if request.container.name == "boom":
            raise RuntimeError("no CPUs left")
        self.calls.append(("create_container", request.container.id))
        adjust = api.ContainerAdjustment()
        adjust.linux.resources.cpu.cpus = "2-3"
        return api.CreateContainerResponse(adjust=adjust)


@pytest.fixture
def connected(runtime: socket.socket) -> Iterator[tuple[Plugin, Peer, Recorder]]:
    recorder = Recorder()
    plugin = Plugin(recorder, name="drakit", index="10", socket_path=socket_path(runtime))
    result: list[object] = []

    def connect() -> None:
        try:
            result.append(plugin.connect())
        except NRIError as exc:  # a test that ends before registration completes
            result.append(exc)

    connecting = threading.Thread(target=connect)
    connecting.start()
    peer = Peer(runtime.accept()[0])
    try:
        yield plugin, peer, recorder
    finally:
        plugin.close()
        peer.sock.close()
        connecting.join(5)


def test_registration_names_the_plugin_and_its_nri_version(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    _, peer, _ = connected
    registered = peer.accept_registration()
    assert (registered.plugin_name, registered.plugin_idx) == ("drakit", "10")
    assert registered.NRI_version == "v0.12.3"


def test_configure_answers_the_mask_of_the_overridden_handlers(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    plugin, peer, recorder = connected
    response = peer.handshake()
    # RUN_POD_SANDBOX (1) and CREATE_CONTAINER (4): bits 0x1 and 0x8.
    assert response.events == 0x9
    assert plugin.runtime == ("fake", "")
    assert recorder.calls == [("configure", "fake")]
    assert plugin.synchronized.is_set()
    assert plugin.connected


def test_a_split_synchronize_is_answered_more_until_the_last_chunk(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    plugin, peer, recorder = connected
    peer.accept_registration()
    peer.call("Configure", api.ConfigureRequest())
    first = api.SynchronizeRequest(
        pods=[api.PodSandbox(id="p1")], containers=[api.Container(id="c1")], more=True
    )
    partial = api.SynchronizeResponse.FromString(peer.call("Synchronize", first).payload)
    assert partial == api.SynchronizeResponse(more=True)
    assert not plugin.synchronized.is_set()
    last = api.SynchronizeRequest(containers=[api.Container(id="c2")])
    final = api.SynchronizeResponse.FromString(peer.call("Synchronize", last).payload)
    assert [u.container_id for u in final.update] == ["c1", "c2"]
    assert not final.more
    assert recorder.synced == [(["p1"], ["c1", "c2"])]
    assert plugin.synchronized.is_set()


def test_create_container_returns_the_handlers_adjustment(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    _, peer, recorder = connected
    peer.handshake()
    request = api.CreateContainerRequest(
        pod=api.PodSandbox(id="p"), container=api.Container(id="c", name="app")
    )
    reply = peer.call("CreateContainer", request)
    assert not reply.HasField("status")
    response = api.CreateContainerResponse.FromString(reply.payload)
    assert response.adjust.linux.resources.cpu.cpus == "2-3"
    assert recorder.calls[-1] == ("create_container", "c")


def test_a_failing_handler_fails_the_request_with_its_message(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    _, peer, _ = connected
    peer.handshake()
    request = api.CreateContainerRequest(container=api.Container(name="boom"))
    status = peer.call("CreateContainer", request).status
    assert (status.code, status.message) == (2, "RuntimeError: no CPUs left")


def test_unknown_and_unsubscribed_methods_are_unimplemented(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    _, peer, _ = connected
    peer.handshake()
    stop = peer.call("StopContainer", api.StopContainerRequest()).status
    assert (stop.code, stop.message) == (12, "method StopContainer")
    other = peer.call("Frobnicate", api.Empty()).status
    assert (other.code, other.message) == (12, "method Frobnicate")
    service = peer.call("Configure", api.ConfigureRequest(), service="Plugin").status
    assert (service.code, service.message) == (12, "service Plugin")


def test_state_change_reaches_the_same_handler(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    _, peer, recorder = connected
    peer.handshake()
    event = api.StateChangeEvent(event=api.RUN_POD_SANDBOX, pod=api.PodSandbox(id="old"))
    assert peer.call("StateChange", event).status.code == 0
    # An event the plugin did not subscribe to is acknowledged and not delivered.
    ignored = api.StateChangeEvent(event=api.REMOVE_CONTAINER, pod=api.PodSandbox(id="x"))
    assert peer.call("StateChange", ignored).status.code == 0
    assert recorder.calls[-1] == ("run_pod_sandbox", "old")


def test_bad_stream_ids_are_refused_as_ttrpc_does(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    _, peer, _ = connected
    peer.accept_registration()
    peer.send_raw(1, 2, ttrpc.Request(service=PLUGIN, method="Configure"))
    frame = peer.read(1)
    status = ttrpc.Response.FromString(frame.data).status
    assert (frame.stream_id, status.code) == (2, 3)
    assert "must be odd" in status.message
    assert peer.call("Configure", api.ConfigureRequest()).status.code == 0  # sid 1
    peer.send_raw(1, 1, ttrpc.Request(service=PLUGIN, method="Configure"))
    assert "cannot be re-used" in ttrpc.Response.FromString(peer.read(1).data).status.message


def test_an_oversized_request_is_answered_resource_exhausted(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    _, peer, _ = connected
    peer.accept_registration()
    length = (4 << 20) + 1
    header = length.to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\x01\x00"
    body = header + b"\x00" * length
    peer.sock.sendall(encode_mux(1, body[:4096]) + encode_mux(1, body[4096:]))
    frame = peer.read(1)
    assert ttrpc.Response.FromString(frame.data).status.code == 8
    peer.next_sid = 3
    assert peer.call("Configure", api.ConfigureRequest()).status.code == 0  # still serving


def test_a_registration_error_is_raised(runtime: socket.socket) -> None:
    plugin = Plugin(Recorder(), name="drakit", index="10", socket_path=socket_path(runtime))
    errors: list[Exception] = []

    def connect() -> None:
        try:
            plugin.connect()
        except NRIError as exc:
            errors.append(exc)

    thread = threading.Thread(target=connect)
    thread.start()
    peer = Peer(runtime.accept()[0])
    frame = peer.read(2)
    peer.reply(2, frame.stream_id, ttrpc.Response(status=ttrpc.Status(code=3, message="bad idx")))
    thread.join(5)
    peer.sock.close()
    assert [str(e) for e in errors] == [
        "nri.pkg.api.v1alpha1.Runtime/RegisterPlugin: code 3: bad idx"
    ]
    assert not plugin.connected


def test_no_answer_to_registration_times_out(runtime: socket.socket) -> None:
    plugin = Plugin(
        Recorder(),
        name="drakit",
        index="10",
        socket_path=socket_path(runtime),
        register_timeout=0.2,
    )
    with pytest.raises(NRIError, match=r"RegisterPlugin: no answer in 0.2s"):
        plugin.connect()


def test_no_socket_names_the_path(tmp_path: Path) -> None:
    plugin = Plugin(Recorder(), name="drakit", index="10", socket_path=tmp_path / "nri.sock")
    with pytest.raises(NRIError, match=r"cannot connect to the NRI socket .*nri\.sock"):
        plugin.connect()


def test_run_reconnects_after_the_runtime_goes_away(runtime: socket.socket) -> None:
    recorder = Recorder()
    plugin = Plugin(recorder, name="drakit", index="10", socket_path=socket_path(runtime))
    runner = threading.Thread(target=plugin.run, kwargs={"backoff": 0.05}, daemon=True)
    runner.start()
    try:
        first = Peer(runtime.accept()[0])
        first.handshake(pods=1)
        first.sock.close()  # the runtime restarts
        second = Peer(runtime.accept()[0])
        second.handshake(pods=2)
        deadline = time.monotonic() + 5
        while len(recorder.synced) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert recorder.synced == [(["p0"], []), (["p0", "p1"], [])]
        second.sock.close()
    finally:
        plugin.stop()
        runner.join(5)
    assert not runner.is_alive()


def test_calls_on_a_closed_connection_fail(runtime: socket.socket) -> None:
    plugin = Plugin(Recorder(), name="drakit", index="10", socket_path=socket_path(runtime))
    conns: list[Connection] = []
    thread = threading.Thread(target=lambda: conns.append(plugin.connect()))
    thread.start()
    peer = Peer(runtime.accept()[0])
    peer.handshake()
    thread.join(5)
    (conn,) = conns
    # A call in flight when the runtime goes away fails with ClosedError, and so do later ones.
    errors: list[Exception] = []

    def update() -> None:
        try:
            conn.call("UpdateContainers", api.UpdateContainersRequest(), api.Empty(), 5)
        except ClosedError as exc:
            errors.append(exc)

    caller = threading.Thread(target=update)
    caller.start()
    peer.read(2)
    peer.sock.close()
    caller.join(5)
    plugin.close()
    assert [str(e) for e in errors] == ["NRI connection closed: the runtime closed the connection"]
    assert conn.closed.is_set()
    assert not plugin.connected
    with pytest.raises(ClosedError):
        conn.call("UpdateContainers", api.UpdateContainersRequest(), api.Empty(), 1)


def test_a_handler_set_without_events_is_refused() -> None:
    with pytest.raises(ValueError, match="overrides no event handler"):
        event_mask(Handlers())


@pytest.mark.parametrize(
    ("name", "index", "message"),
    [
        ("", "10", "plugin name ''"),
        ("drakit node", "10", "letters, digits"),
        ("drakit", "1", "exactly two digits"),
        ("drakit", "1a", "exactly two digits"),
    ],
)
def test_registration_fields_are_checked_as_the_runtime_does(
    name: str, index: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_registration(name, index)


def test_update_containers_calls_the_runtime_and_returns_the_failed(
    connected: tuple[Plugin, Peer, Recorder],
) -> None:
    plugin, peer, _ = connected
    peer.handshake()
    failed: list[list[api.ContainerUpdate]] = []
    update = api.ContainerUpdate(container_id="c1")
    update.linux.resources.cpu.cpus = "4-7"
    caller = threading.Thread(target=lambda: failed.append(plugin.update_containers([update])))
    caller.start()
    frame = peer.read(2)
    request = ttrpc.Request.FromString(frame.data)
    assert (frame.stream_id, request.method) == (3, "UpdateContainers")  # after RegisterPlugin's 1
    sent = api.UpdateContainersRequest.FromString(request.payload)
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in sent.update] == [("c1", "4-7")]
    answer = api.UpdateContainersResponse(failed=[api.ContainerUpdate(container_id="c1")])
    peer.reply(2, frame.stream_id, ttrpc.Response(payload=answer.SerializeToString()))
    caller.join(5)
    assert [[u.container_id for u in f] for f in failed] == [["c1"]]


def test_update_containers_needs_a_connection() -> None:
    plugin = Plugin(Recorder(), name="drakit", index="10", socket_path=Path("/nonexistent"))
    with pytest.raises(ClosedError, match="not connected"):
        plugin.update_containers([])
