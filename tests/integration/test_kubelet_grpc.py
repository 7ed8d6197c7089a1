"""drakit.kubelet over real gRPC on real Unix sockets, driven by the generated client stubs."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest

from drakit.kubelet import (
    DRA_PLUGIN_TYPE,
    HealthBroadcaster,
    KubeletPluginServer,
    SocketPathTooLongError,
    grpc_initialised,
    socket_paths,
)
from drakit.kubelet._proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from drakit.models import (
    ClaimPrepareResult,
    ClaimRef,
    ClaimUnprepareResult,
    DeviceHealth,
    PreparedDeviceRef,
)

DRIVER = "gpu.example.com"
POD_UID = "0b6e3c1e-6f55-4a7e-9a43-2f1f7d4a9c11"


class FakeHandler:
    """A NodeHandler that records calls and answers from tables."""

    def __init__(self) -> None:
        self.prepare_calls: list[list[ClaimRef]] = []
        self.unprepare_calls: list[list[ClaimRef]] = []
        self.raise_exc: Exception | None = None
        self.block: threading.Event | None = None
        self.entered = threading.Event()

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimPrepareResult]:
        self.prepare_calls.append(list(claims))
        self.entered.set()
        if self.block is not None:
            assert self.block.wait(10)
        if self.raise_exc is not None:
            raise self.raise_exc
        out: dict[str, ClaimPrepareResult] = {}
        for c in claims:
            if c.name.startswith("bad"):
                out[c.uid] = ClaimPrepareResult(error=f"no device for {c.name}")
            elif c.name.startswith("missing"):
                continue
            else:
                out[c.uid] = ClaimPrepareResult(
                    devices=[
                        PreparedDeviceRef(
                            requests=["gpu/small", "gpu/large", "nic"],
                            pool="node-a",
                            device="gpu-0",
                            cdi_device_ids=[f"example.com/gpu={c.uid}-gpu-0"],
                        ),
                        PreparedDeviceRef(
                            requests=[], pool="node-a", device="gpu-1", cdi_device_ids=[]
                        ),
                    ]
                )
        out["not-asked-for"] = ClaimPrepareResult()
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimUnprepareResult]:
        self.unprepare_calls.append(list(claims))
        if self.raise_exc is not None:
            raise self.raise_exc
        return {
            c.uid: ClaimUnprepareResult(error="busy" if c.name.startswith("bad") else "")
            for c in claims
            if not c.name.startswith("missing")
        }


@pytest.fixture
def kubelet_dir() -> Iterator[Path]:
    """A short kubelet root (Unix socket paths are limited to 107 bytes) with plugins_registry/."""
    root = Path(tempfile.mkdtemp(prefix="dk", dir="/tmp"))
    (root / "plugins_registry").mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def handler() -> FakeHandler:
    return FakeHandler()


@pytest.fixture
def server(kubelet_dir: Path, handler: FakeHandler) -> Iterator[KubeletPluginServer]:
    srv = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, instance_id=POD_UID)
    srv.start()
    yield srv
    if handler.block is not None:
        handler.block.set()
    srv.stop(grace=1)


def channel(path: Path) -> grpc.Channel:
    return grpc.insecure_channel(f"unix:{path}")


def get_info(path: Path) -> pluginregistration_pb2.PluginInfo:
    with channel(path) as ch:
        stub = pluginregistration_pb2_grpc.RegistrationStub(ch)
        return stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=5)


def claims(api: ModuleType, *names: str) -> list[Any]:
    return [api.Claim(namespace="default", name=n, uid=f"uid-{n}") for n in names]


# --- registration -------------------------------------------------------------------------------


def test_get_info_reports_driver_endpoint_and_v1_first(server: KubeletPluginServer) -> None:
    assert server.registration_status is None
    info = get_info(server.registration_socket)
    assert info.type == DRA_PLUGIN_TYPE == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(server.dra_socket)
    assert Path(info.endpoint).is_absolute()
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def test_get_info_advertises_health_services_after_node_services(
    kubelet_dir: Path, handler: FakeHandler
) -> None:
    with KubeletPluginServer(
        DRIVER, handler, kubelet_dir=kubelet_dir, health_source=HealthBroadcaster()
    ) as srv:
        info = get_info(srv.registration_socket)
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]


def test_get_info_without_v1beta1(kubelet_dir: Path, handler: FakeHandler) -> None:
    with KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, serve_v1beta1=False) as srv:
        assert list(get_info(srv.registration_socket).supported_versions) == ["v1.DRAPlugin"]
        with channel(srv.dra_socket) as ch, pytest.raises(grpc.RpcError) as err:
            dra_v1beta1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
                dra_v1beta1_pb2.NodePrepareResourcesRequest(), timeout=5
            )
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_servers_serve_while_grpc_is_held_initialised_and_it_runs_no_thread_of_its_own(
    kubelet_dir: Path, handler: FakeHandler
) -> None:
    # Node.start holds it around the whole life of its kubelet servers
    with grpc_initialised():
        with KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir) as srv:
            assert get_info(srv.registration_socket).name == DRIVER
            names = [t.name for t in threading.enumerate()]
        assert not [n for n in names if n.startswith("drakit-grpc-init")]
    with KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir) as srv:  # and after it
        assert get_info(srv.registration_socket).name == DRIVER


def test_notify_registration_status_success(server: KubeletPluginServer) -> None:
    assert not server.wait_registered(timeout=0)
    with channel(server.registration_socket) as ch:
        pluginregistration_pb2_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
            pluginregistration_pb2.RegistrationStatus(plugin_registered=True), timeout=5
        )
    assert server.wait_registered(timeout=1)
    assert server.registered
    status = server.registration_status
    assert status is not None
    assert status.registered
    assert status.error == ""


def test_notify_registration_status_failure_is_recorded_logged_and_answered_with_error(
    server: KubeletPluginServer, caplog: pytest.LogCaptureFixture
) -> None:
    stub_status = pluginregistration_pb2.RegistrationStatus(
        plugin_registered=False, error="endpoint already registered"
    )
    with (
        caplog.at_level(logging.ERROR, logger="drakit.kubelet"),
        channel(server.registration_socket) as ch,
        pytest.raises(grpc.RpcError) as err,
    ):
        pluginregistration_pb2_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
            stub_status, timeout=5
        )
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert "failed registration process: endpoint already registered" in (err.value.details() or "")
    assert not server.registered
    assert not server.wait_registered(timeout=0)
    status = server.registration_status
    assert status is not None
    assert not status.registered
    assert status.error == "endpoint already registered"
    assert "endpoint already registered" in caplog.text


# --- DRA node service ---------------------------------------------------------------------------

API_VERSIONS = [
    pytest.param((dra_v1_pb2, dra_v1_pb2_grpc), id="v1"),
    pytest.param((dra_v1beta1_pb2, dra_v1beta1_pb2_grpc), id="v1beta1"),
]


@pytest.mark.parametrize("api", API_VERSIONS)
def test_prepare_maps_results_per_claim(
    server: KubeletPluginServer, handler: FakeHandler, api: tuple[ModuleType, ModuleType]
) -> None:
    pb, pb_grpc = api
    with channel(server.dra_socket) as ch:
        resp = pb_grpc.DRAPluginStub(ch).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=claims(pb, "ok", "bad", "missing")), timeout=5
        )
    assert [[(c.namespace, c.name, c.uid) for c in call] for call in handler.prepare_calls] == [
        [
            ("default", "ok", "uid-ok"),
            ("default", "bad", "uid-bad"),
            ("default", "missing", "uid-missing"),
        ]
    ]
    assert set(resp.claims) == {"uid-ok", "uid-bad", "uid-missing"}  # not "not-asked-for"
    ok = resp.claims["uid-ok"]
    assert ok.error == ""
    assert [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
        for d in ok.devices
    ] == [
        (["gpu", "nic"], "node-a", "gpu-0", ["example.com/gpu=uid-ok-gpu-0"]),
        ([], "node-a", "gpu-1", []),
    ]
    if pb is dra_v1_pb2:
        assert not any(d.HasField("share_id") for d in ok.devices)
    assert resp.claims["uid-bad"].error == "no device for bad"
    assert len(resp.claims["uid-bad"].devices) == 0
    assert "returned no result" in resp.claims["uid-missing"].error


@pytest.mark.parametrize("api", API_VERSIONS)
def test_unprepare_maps_results_per_claim(
    server: KubeletPluginServer, handler: FakeHandler, api: tuple[ModuleType, ModuleType]
) -> None:
    pb, pb_grpc = api
    with channel(server.dra_socket) as ch:
        resp = pb_grpc.DRAPluginStub(ch).NodeUnprepareResources(
            pb.NodeUnprepareResourcesRequest(claims=claims(pb, "ok", "bad", "missing")), timeout=5
        )
    assert [c.uid for c in handler.unprepare_calls[0]] == ["uid-ok", "uid-bad", "uid-missing"]
    assert {uid: r.error for uid, r in resp.claims.items() if uid != "uid-missing"} == {
        "uid-ok": "",
        "uid-bad": "busy",
    }
    assert "returned no result" in resp.claims["uid-missing"].error


@pytest.mark.parametrize("api", API_VERSIONS)
def test_handler_exception_fails_every_claim_of_the_call(
    server: KubeletPluginServer, handler: FakeHandler, api: tuple[ModuleType, ModuleType]
) -> None:
    pb, pb_grpc = api
    handler.raise_exc = OSError("device node vanished")
    with channel(server.dra_socket) as ch:
        stub = pb_grpc.DRAPluginStub(ch)
        prep = stub.NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=claims(pb, "a", "b")), timeout=5
        )
        unprep = stub.NodeUnprepareResources(
            pb.NodeUnprepareResourcesRequest(claims=claims(pb, "a", "b")), timeout=5
        )
        # the server is still fine afterwards
        handler.raise_exc = None
        again = stub.NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=claims(pb, "a")), timeout=5
        )
    for resp in (prep, unprep):
        assert set(resp.claims) == {"uid-a", "uid-b"}
        for entry in resp.claims.values():
            assert "OSError: device node vanished" in entry.error
    assert len(prep.claims["uid-a"].devices) == 0
    assert again.claims["uid-a"].error == ""


@pytest.mark.parametrize("api", API_VERSIONS)
def test_empty_requests_succeed_without_calling_the_handler(
    server: KubeletPluginServer, handler: FakeHandler, api: tuple[ModuleType, ModuleType]
) -> None:
    pb, pb_grpc = api
    with channel(server.dra_socket) as ch:
        stub = pb_grpc.DRAPluginStub(ch)
        prep = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(), timeout=5)
        unprep = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(), timeout=5)
    assert len(prep.claims) == 0
    assert len(unprep.claims) == 0
    assert handler.prepare_calls == []
    assert handler.unprepare_calls == []


def test_repeated_claim_uids_reach_the_handler_once(
    server: KubeletPluginServer, handler: FakeHandler
) -> None:
    with channel(server.dra_socket) as ch:
        resp = dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=claims(dra_v1_pb2, "ok", "ok")),
            timeout=5,
        )
    assert [c.uid for c in handler.prepare_calls[0]] == ["uid-ok"]
    assert list(resp.claims) == ["uid-ok"]


# --- health -------------------------------------------------------------------------------------

HEALTH_VERSIONS = [
    pytest.param((health_v1_pb2, health_v1_pb2_grpc), id="v1"),
    pytest.param((health_v1alpha1_pb2, health_v1alpha1_pb2_grpc), id="v1alpha1"),
]
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def dev(name: str, health: str = "Healthy", message: str = "") -> DeviceHealth:
    return DeviceHealth.model_validate(
        {"pool": "node-a", "device": name, "health": health, "message": message, "last_updated": T0}
    )


class StreamReader:
    """Reads a server stream on a thread so that the test can wait with a timeout."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.items: queue.Queue[tuple[float, Any]] = queue.Queue()
        self.ended = threading.Event()
        self.error: grpc.RpcError | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self.call:
                self.items.put((time.monotonic(), item))
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.ended.set()

    def next(self, timeout: float = 5) -> tuple[float, Any]:
        return self.items.get(timeout=timeout)


def as_tuples(resp: Any) -> list[tuple[str, str, int, str]]:
    return [(d.device.pool_name, d.device.device_name, d.health, d.message) for d in resp.devices]


@pytest.mark.parametrize("api", HEALTH_VERSIONS)
def test_health_stream_sends_full_list_on_connect_and_on_change(
    kubelet_dir: Path, handler: FakeHandler, api: tuple[ModuleType, ModuleType]
) -> None:
    pb, pb_grpc = api
    source = HealthBroadcaster([dev("gpu-0"), dev("gpu-1")])
    srv = KubeletPluginServer(
        DRIVER,
        handler,
        kubelet_dir=kubelet_dir,
        health_source=source,
        health_interval=60,
        health_timeout_seconds=45,
    )
    with channel(srv.dra_socket) as ch, srv:
        reader = StreamReader(
            pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest())
        )
        _, first = reader.next()
        assert as_tuples(first) == [
            ("node-a", "gpu-0", pb.HEALTHY, ""),
            ("node-a", "gpu-1", pb.HEALTHY, ""),
        ]
        assert {d.last_updated_time for d in first.devices} == {int(T0.timestamp())}
        assert {d.health_check_timeout_seconds for d in first.devices} == {45}

        # only last_updated changed: no send
        assert not source.update([dev("gpu-0"), dev("gpu-1")])
        assert source.update([dev("gpu-0"), dev("gpu-1", "Unhealthy", "x" * 2000)])
        _, second = reader.next()
        assert as_tuples(second)[0] == ("node-a", "gpu-0", pb.HEALTHY, "")
        _, _, health, message = as_tuples(second)[1]
        assert health == pb.UNHEALTHY
        assert len(message) == 1024
        assert message.endswith("x...")
        assert source.update([dev("gpu-0", "Unknown")])
        _, third = reader.next()
        assert as_tuples(third) == [("node-a", "gpu-0", pb.UNKNOWN, "")]
        with pytest.raises(queue.Empty):
            reader.next(timeout=0.3)
        srv.stop()  # ends the stream cleanly, while the client is still connected
        assert reader.ended.wait(5)
        assert reader.error is None


@pytest.mark.parametrize("api", HEALTH_VERSIONS)
def test_health_stream_resends_periodically(
    kubelet_dir: Path, handler: FakeHandler, api: tuple[ModuleType, ModuleType]
) -> None:
    pb, pb_grpc = api
    source = HealthBroadcaster([dev("gpu-0")])
    srv = KubeletPluginServer(
        DRIVER, handler, kubelet_dir=kubelet_dir, health_source=source, health_interval=0.3
    )
    with channel(srv.dra_socket) as ch, srv:
        reader = StreamReader(
            pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest())
        )
        t1, first = reader.next()
        t2, second = reader.next()
        t3, third = reader.next()
        assert as_tuples(first) == as_tuples(second) == as_tuples(third)
        assert t2 - t1 >= 0.25
        assert t3 - t2 >= 0.25
        srv.stop()
        assert reader.ended.wait(5)
        assert reader.error is None


def test_health_stream_ends_when_the_client_cancels(
    kubelet_dir: Path, handler: FakeHandler
) -> None:
    source = HealthBroadcaster([dev("gpu-0")])
    with (
        KubeletPluginServer(
            DRIVER, handler, kubelet_dir=kubelet_dir, health_source=source, health_interval=60
        ) as srv,
        channel(srv.dra_socket) as ch,
    ):
        call = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            health_v1alpha1_pb2.NodeWatchResourcesRequest()
        )
        reader = StreamReader(call)
        reader.next()
        call.cancel()  # type: ignore[no-untyped-call]
        assert reader.ended.wait(5)
        deadline = time.monotonic() + 5
        while srv._streamer is not None and srv._streamer.active_streams:
            assert time.monotonic() < deadline, "server kept the cancelled stream open"
            time.sleep(0.05)


def test_health_services_absent_without_source(server: KubeletPluginServer) -> None:
    with channel(server.dra_socket) as ch, pytest.raises(grpc.RpcError) as err:
        next(
            iter(
                health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                    health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=5
                )
            )
        )
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --- lifecycle ----------------------------------------------------------------------------------


def test_stop_lets_in_flight_call_finish_then_removes_sockets(
    kubelet_dir: Path, handler: FakeHandler
) -> None:
    srv = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, instance_id=POD_UID)
    srv.start()
    reg, dra = srv.registration_socket, srv.dra_socket
    assert reg.is_socket()
    assert dra.is_socket()
    handler.block = threading.Event()
    with channel(dra) as ch:
        stub = dra_v1_pb2_grpc.DRAPluginStub(ch)
        future = stub.NodePrepareResources.future(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=claims(dra_v1_pb2, "slow")), timeout=10
        )
        assert handler.entered.wait(5)
        stopper = threading.Thread(target=srv.stop, kwargs={"grace": 5})
        stopper.start()
        deadline = time.monotonic() + 5
        while reg.exists():  # registration socket goes first: the kubelet deregisters us
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert stopper.is_alive()  # waiting for the in-flight call
        handler.block.set()
        resp = future.result(timeout=5)
        stopper.join(5)
    assert not stopper.is_alive()
    assert resp.claims["uid-slow"].error == ""
    assert not reg.exists()
    assert not dra.exists()
    assert not srv.running
    assert sorted(p.name for p in kubelet_dir.rglob("*") if not p.is_dir()) == []
    srv.stop()  # idempotent


def test_stale_sockets_of_this_instance_are_replaced_on_start(
    kubelet_dir: Path, handler: FakeHandler
) -> None:
    paths = socket_paths(DRIVER, kubelet_dir, POD_UID)
    paths.dra.parent.mkdir(parents=True)
    for p in (paths.registration, paths.dra):  # what a killed process leaves behind
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    other = kubelet_dir / "plugins_registry" / f"{DRIVER}-other-pod-reg.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(other))
    s.close()
    with KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, instance_id=POD_UID) as srv:
        assert get_info(srv.registration_socket).endpoint == str(paths.dra)
        # no hidden temporary names left behind
        assert [p.name for p in kubelet_dir.rglob(".*")] == []
    assert other.is_socket()  # another instance's socket is never touched


def test_rolling_update_two_instances_coexist(kubelet_dir: Path, handler: FakeHandler) -> None:
    old = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, instance_id="pod-old")
    new = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, instance_id="pod-new")
    old.start()
    new.start()
    try:
        assert old.registration_socket != new.registration_socket
        assert old.dra_socket != new.dra_socket
        assert old.registration_socket.parent == new.registration_socket.parent
        assert old.registration_socket.name == f"{DRIVER}-pod-old-reg.sock"
        assert old.dra_socket == kubelet_dir / "plugins" / DRIVER / "dra-pod-old.sock"
        info_old = get_info(old.registration_socket)
        info_new = get_info(new.registration_socket)
        assert info_old.name == info_new.name == DRIVER
        assert (info_old.endpoint, info_new.endpoint) == (str(old.dra_socket), str(new.dra_socket))
        old.stop()
        assert not old.registration_socket.exists()
        assert not old.dra_socket.exists()
        assert new.registration_socket.is_socket()
        assert get_info(new.registration_socket).endpoint == str(new.dra_socket)
        with channel(new.dra_socket) as ch:
            resp = dra_v1_pb2_grpc.DRAPluginStub(ch).NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=claims(dra_v1_pb2, "x")),
                timeout=5,
            )
        assert resp.claims["uid-x"].error == ""
    finally:
        old.stop()
        new.stop()


def test_instance_with_fixed_names_never_removes_its_successors_sockets(
    kubelet_dir: Path, handler: FakeHandler
) -> None:
    first = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir)
    second = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir)
    assert first.registration_socket.name == f"{DRIVER}-reg.sock"
    assert first.dra_socket.name == "dra.sock"
    first.start()
    second.start()  # takes the names over
    try:
        first.stop()
        assert second.registration_socket.is_socket()
        assert get_info(second.registration_socket).name == DRIVER
    finally:
        second.stop()
    assert not second.registration_socket.exists()


def test_several_drivers_in_one_process(kubelet_dir: Path, handler: FakeHandler) -> None:
    other = FakeHandler()
    with (
        KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir) as a,
        KubeletPluginServer("nic.example.com", other, kubelet_dir=kubelet_dir) as b,
    ):
        assert a.dra_socket.parent != b.dra_socket.parent
        assert get_info(a.registration_socket).name == DRIVER
        assert get_info(b.registration_socket).name == "nic.example.com"
        for srv in (a, b):
            with channel(srv.dra_socket) as ch:
                dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
                    dra_v1_pb2.NodePrepareResourcesRequest(
                        claims=claims(dra_v1_pb2, srv.driver_name)
                    ),
                    timeout=5,
                )
    assert [c[0].name for c in handler.prepare_calls] == [DRIVER]
    assert [c[0].name for c in other.prepare_calls] == ["nic.example.com"]


def test_socket_names_fall_back_to_hashes_when_the_path_is_long() -> None:
    # long enough that "<driver>-<uid>-reg.sock" (62 bytes) does not fit, short enough for 26
    root = Path("/" + "k" * (107 - 1 - len("/plugins_registry/") - 40))
    paths = socket_paths(DRIVER, root, POD_UID)
    assert len(os.fsencode(paths.registration)) <= 107
    assert paths.registration.name.startswith(f"{DRIVER}-")
    assert POD_UID not in paths.registration.name
    assert paths.registration.name.endswith("-reg.sock")
    assert len(os.fsencode(paths.dra)) <= 107
    assert POD_UID not in paths.dra.name
    # stable: the same instance computes the same names after a restart
    assert socket_paths(DRIVER, root, POD_UID) == paths
    assert socket_paths(DRIVER, root, "another-pod") != paths


def test_path_too_long_is_a_clear_error(tmp_path: Path, handler: FakeHandler) -> None:
    root = tmp_path / ("k" * 100)
    with pytest.raises(SocketPathTooLongError) as err:
        KubeletPluginServer(DRIVER, handler, kubelet_dir=root, instance_id=POD_UID)
    msg = str(err.value)
    assert str(root / "plugins_registry") in msg
    assert "107 bytes" in msg
    assert "--root-dir" in msg
    assert isinstance(err.value, ValueError)


def test_bad_names_are_rejected(kubelet_dir: Path, handler: FakeHandler) -> None:
    with pytest.raises(ValueError, match="DNS subdomain"):
        KubeletPluginServer("../evil", handler, kubelet_dir=kubelet_dir)
    with pytest.raises(ValueError, match="instance id"):
        KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, instance_id="a/b")


def test_missing_registry_dir_is_a_clear_error(kubelet_dir: Path, handler: FakeHandler) -> None:
    (kubelet_dir / "plugins_registry").rmdir()
    srv = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir)
    with pytest.raises(FileNotFoundError, match="plugins_registry"):
        srv.start()
    assert not srv.running


def test_failed_start_leaves_nothing_behind(kubelet_dir: Path, handler: FakeHandler) -> None:
    srv = KubeletPluginServer(DRIVER, handler, kubelet_dir=kubelet_dir, instance_id=POD_UID)
    srv.registration_socket.mkdir()  # something that is not ours to replace
    with pytest.raises(OSError, match="directory"):
        srv.start()
    assert not srv.running
    assert not srv.dra_socket.exists()
    assert [p.name for p in kubelet_dir.rglob(".*")] == []
    srv.stop()
