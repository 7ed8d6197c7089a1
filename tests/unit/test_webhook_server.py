"""The HTTPS transport: TLS from files, reloaded when they change; paths; bad requests.

The server runs in a thread on 127.0.0.1 with certificates made by ``cryptography``; clients
verify it against the CA. The engine is the real one (it holds no API client).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.webhookproc import Certificates, make_certificates, sign_client_certificate

from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import NodeInfo
from drakit.webhook import WebhookServer
from drakit.webhook.admission import Admission
from drakit_composite.admission import PAIRS_ANNOTATION, AdmissionSettings, PairPods

pytestmark = pytest.mark.usefixtures("clean_drakit_env")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WebhookServer, Certificates]]:
    certs = make_certificates(tmp_path / "a")
    host = PluginHost(
        DrakitSettings(plugins={"cpu": {}, "composite": {}}),
        NodeInfo(name="webhook", sysfs_root="/nonexistent"),
    )
    engine = Admission(host, [PairPods(AdmissionSettings())])
    server = WebhookServer(engine, certs.cert, certs.key, address="127.0.0.1", port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, certs
    finally:
        server.shutdown()
        thread.join(10)


def call(
    server: WebhookServer, ctx: ssl.SSLContext, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def pod_review() -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "ns",
                "dryRun": True,
                "object": {
                    "metadata": {"name": "p", "annotations": {PAIRS_ANNOTATION: "2"}},
                    "spec": {"containers": [{"name": "c"}]},
                },
            },
        }
    ).encode()


def test_paths(served: tuple[WebhookServer, Certificates]) -> None:
    server, certs = served
    ctx = certs.context()
    assert call(server, ctx, "GET", "/healthz") == (200, b"ok\n")
    assert call(server, ctx, "GET", "/nope")[0] == 404
    status, body = call(server, ctx, "POST", "/mutate-pods", pod_review())
    assert status == 200
    response = json.loads(body)["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == (
        "u-1",
        True,
        "JSONPatch",
    )
    status, body = call(server, ctx, "POST", "/validate-claims", pod_review())
    assert (status, json.loads(body)["response"]["allowed"]) == (200, True)
    assert call(server, ctx, "POST", "/mutate-pods", b"{}")[0] == 400
    assert call(server, ctx, "POST", "/mutate-pods", b"not json")[0] == 400


def test_a_client_that_does_not_trust_the_ca_is_refused(
    served: tuple[WebhookServer, Certificates], tmp_path: Path
) -> None:
    server, _ = served
    other = make_certificates(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        call(server, other.context(), "GET", "/healthz")


def test_certificates_are_reloaded_when_the_files_change(
    served: tuple[WebhookServer, Certificates], tmp_path: Path
) -> None:
    server, certs = served
    fresh = make_certificates(tmp_path / "b")
    # rotate in place, as cert-manager does: the old CA no longer verifies, the new one does
    time.sleep(0.01)  # a distinct mtime even on coarse clocks
    certs.cert.write_bytes(fresh.cert.read_bytes())
    certs.key.write_bytes(fresh.key.read_bytes())
    assert call(server, fresh.context(), "GET", "/healthz") == (200, b"ok\n")
    with pytest.raises(ssl.SSLCertVerificationError):
        call(server, certs.context(), "GET", "/healthz")
    assert server.certificates.reloads == 1


def test_a_half_written_pair_keeps_the_previous_certificate(
    served: tuple[WebhookServer, Certificates],
) -> None:
    server, certs = served
    good = certs.context()
    certs.key.write_text("-----BEGIN PRIVATE KEY-----\ntruncated\n")
    assert call(server, good, "GET", "/healthz") == (200, b"ok\n")
    assert server.certificates.reloads == 0


def test_unreadable_files_fail_at_start(tmp_path: Path) -> None:
    host = PluginHost(DrakitSettings(plugins={}), NodeInfo(name="w", sysfs_root="/nonexistent"))
    engine = Admission(host, [PairPods(AdmissionSettings())])
    with pytest.raises(FileNotFoundError):
        WebhookServer(engine, tmp_path / "no.crt", tmp_path / "no.key", port=0)


def test_the_command_refuses_a_bad_certificate_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from drakit.commands.cli import main

    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    args = ["webhook", "--cert-file", str(bad), "--key-file", str(bad), "--port", "0"]
    with pytest.raises(SystemExit) as info:
        main([*args, "--kubeconfig", str(kubeconfig), "--address", "127.0.0.1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("drakit: error: cannot serve on 127.0.0.1:0 with ")
    assert len(err.strip().splitlines()) == 1


@pytest.fixture
def bounded(tmp_path: Path) -> Iterator[tuple[WebhookServer, Certificates]]:
    """A server with 4 connection slots and a 1 s request deadline."""
    certs = make_certificates(tmp_path / "b")
    with _serving(certs, max_connections=4, request_deadline=1.0) as server:
        yield server, certs


@contextmanager
def _serving(certs: Certificates, **options: Any) -> Iterator[WebhookServer]:
    """The pair webhook served on a free loopback port with ``certs``, on a thread."""
    host = PluginHost(
        DrakitSettings(plugins={"cpu": {}, "composite": {}}),
        NodeInfo(name="webhook", sysfs_root="/nonexistent"),
    )
    engine = Admission(host, [PairPods(AdmissionSettings())])
    server = WebhookServer(engine, certs.cert, certs.key, address="127.0.0.1", port=0, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(10)


def _slow_client(server: WebhookServer, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    """A TLS connection that sends the start of a request and then one byte now and then."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    tls.sendall(b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\n")
    return tls


def test_a_slow_client_is_cut_off_at_the_deadline(
    bounded: tuple[WebhookServer, Certificates],
) -> None:
    """Issue 30, class 7: a byte every half second never holds a connection past 1 s."""
    server, certs = bounded
    tls = _slow_client(server, certs.context())
    start = time.monotonic()
    closed = False
    try:
        while time.monotonic() - start < 8:
            try:
                tls.sendall(b"X")
                time.sleep(0.5)
            except OSError:
                closed = True
                break
            tls.settimeout(0.01)
            try:
                if tls.recv(1) == b"":
                    closed = True
                    break
            except (TimeoutError, ssl.SSLWantReadError):
                pass
            except OSError:
                closed = True
                break
    finally:
        tls.close()
    assert closed, "the slow client kept its connection"
    assert time.monotonic() - start < 5


def test_connections_beyond_the_limit_are_closed_and_the_rest_are_served(
    bounded: tuple[WebhookServer, Certificates],
) -> None:
    server, certs = bounded
    ctx = certs.context()
    held = [_slow_client(server, ctx) for _ in range(4)]
    try:
        time.sleep(0.2)
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        raw.settimeout(5)
        try:
            assert raw.recv(1) == b"", "a fifth connection is closed at once"
        except ConnectionResetError:
            pass
        finally:
            raw.close()
    finally:
        for tls in held:
            tls.close()
    deadline = time.monotonic() + 5
    while True:  # the slots come back as the held connections end
        try:
            assert call(server, ctx, "GET", "/healthz") == (200, b"ok\n")
            break
        except (OSError, http.client.HTTPException):
            assert time.monotonic() < deadline
            time.sleep(0.1)


def _nested(depth: int) -> dict[str, object]:
    inner: dict[str, object] = {"leaf": 1}
    for _ in range(depth - 1):
        inner = {"x": inner}
    return inner


def claim_review(driver: str, parameters: str) -> bytes:
    """A ResourceClaim CREATE review whose one opaque config has ``parameters`` (raw JSON)."""
    head = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-2",
                "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"},
                "operation": "CREATE",
                "namespace": "ns",
                "dryRun": True,
                "object": {
                    "metadata": {"name": "c"},
                    "spec": {
                        "devices": {
                            "requests": [],
                            "config": [{"opaque": {"driver": driver, "parameters": "@"}}],
                        }
                    },
                },
            },
        }
    )
    return head.replace('"@"', parameters).encode()


def test_deeply_nested_configs_of_other_drivers_are_admitted_and_drakit_ones_refused(
    served: tuple[WebhookServer, Certificates],
) -> None:
    """Issue 30, class 6: the API server accepts another vendor's deep config; so must we."""
    server, certs = served
    ctx = certs.context()
    deep = '{"apiVersion": "v", "kind": "K", "x": ' + "[" * 5000 + "]" * 5000 + "}"
    status, body = call(server, ctx, "POST", "/validate-claims", claim_review("gpu.acme.io", deep))
    assert status == 200, body
    assert json.loads(body)["response"]["allowed"] is True
    # a drakit driver's config that deep is refused, naming the field, not a 500
    for params in (
        deep,
        json.dumps({"apiVersion": "cpu.drakit.io/v1", "kind": "CpuConfig", **_nested(40)}),
    ):
        status, body = call(
            server, ctx, "POST", "/validate-claims", claim_review("cpu.drakit.io", params)
        )
        assert status == 200, body
        response = json.loads(body)["response"]
        assert response["allowed"] is False
        assert (
            "spec.devices.config[0].opaque.parameters: nested deeper than 32 levels"
            in (response["status"]["message"])
        )


@pytest.fixture
def authenticated(tmp_path: Path) -> Iterator[tuple[WebhookServer, Certificates, Certificates]]:
    """A server that answers admissions only to certificates of ``clients``' CA named
    ``kube-apiserver``; its certificates, and the clients' CA with such a client."""
    certs = make_certificates(tmp_path / "s")
    clients = make_certificates(tmp_path / "c", common_name="kube-apiserver")
    names = frozenset({"kube-apiserver"})
    with _serving(certs, client_ca=clients.ca, client_names=names) as server:
        yield server, certs, clients


def test_admission_needs_the_api_servers_client_certificate(
    authenticated: tuple[WebhookServer, Certificates, Certificates], tmp_path: Path
) -> None:
    server, certs, clients = authenticated
    anonymous = certs.context()
    status, body = call(server, anonymous, "POST", "/mutate-pods", pod_review())
    assert (status, body) == (401, b"a client certificate is required\n")
    status, _ = call(server, anonymous, "POST", "/validate-claims", pod_review())
    assert status == 401
    assert call(server, anonymous, "GET", "/healthz")[0] == 200  # the kubelet's probes
    apiserver = certs.context()
    apiserver.load_cert_chain(clients.cert, clients.key)
    status, body = call(server, apiserver, "POST", "/mutate-pods", pod_review())
    assert status == 200
    assert json.loads(body)["response"]["allowed"] is True
    # another name from the same CA: refused by name
    other = make_certificates(tmp_path / "o", common_name="someone")
    named = certs.context()
    named.load_cert_chain(*sign_client_certificate(clients, "someone", tmp_path / "n"))
    assert call(server, named, "POST", "/mutate-pods", pod_review())[0] == 403
    # a certificate of another CA does not even complete the handshake
    stranger = certs.context()
    stranger.load_cert_chain(other.cert, other.key)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        call(server, stranger, "POST", "/mutate-pods", pod_review())
