"""The claim GET's lean path: keep-alive reuse, a connection the server dropped, errors.

A real HTTP server on loopback stands in for the API server (the wire is the seam); the
client is drakit's ``KubeClient`` on a real ``kubernetes`` ApiClient.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import kubernetes
import pytest

from drakit.errors import RetryableError
from drakit.kube import KubeClient, NotFoundError

CLAIM = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the API server
    connections: ClassVar[set[tuple[str, int]]] = set()
    drop_after_reply: ClassVar[bool] = False
    body: ClassVar[bytes | None] = None  # the claim's reply, when set
    reset: ClassVar[bool] = False
    close_on_second: ClassVar[bool] = False
    served = 0  # requests on this connection (one handler instance per connection)

    def do_GET(self) -> None:
        type(self).connections.add(self.client_address)
        self.served += 1
        # close without answering: the client sees the peer go away
        if self.reset or (self.close_on_second and self.served == 2):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            self.close_connection = True
            return
        if self.path != CLAIM:
            body = json.dumps({"kind": "Status", "code": 404, "message": "not found"}).encode()
            self.send_response(404)
        else:
            body = self.body or json.dumps({"metadata": {"name": "c", "uid": "u"}}).encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        # Like an idle timeout on the server: the socket goes away although the reply
        # promised nothing (no "Connection: close"), so the client still holds it.
        self.close_connection = self.drop_after_reply

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[ThreadingHTTPServer, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"connections": set()})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield srv, handler
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def handler(server: tuple[ThreadingHTTPServer, type[_Handler]]) -> type[_Handler]:
    """The test server's handler class: its switches and the connections it saw."""
    return server[1]


@pytest.fixture
def kube(server: tuple[ThreadingHTTPServer, type[_Handler]]) -> KubeClient:
    """A client of the test server."""
    host, port = server[0].server_address[:2]
    cfg = kubernetes.client.Configuration(host=f"http://{host!s}:{port}")
    return KubeClient(kubernetes.client.ApiClient(cfg), request_timeout=5)


def test_gets_reuse_one_keep_alive_connection(handler: type[_Handler], kube: KubeClient) -> None:
    for _ in range(5):
        assert kube.get_resource_claim("ns", "c")["metadata"]["uid"] == "u"
    assert len(handler.connections) == 1


@pytest.mark.parametrize(
    "switch",
    [
        # each connection dropped after its reply: one per GET
        pytest.param("drop_after_reply", id="dropped after the reply"),
        # The race the pool's dropped-connection check cannot see: the server closes the
        # kept-alive connection just as the next request goes out on it; retried once on a new
        # one, so every second request on a connection moves on.
        pytest.param("close_on_second", id="closed as the request arrives"),
    ],
)
def test_a_connection_the_server_closed_is_replaced_and_the_get_succeeds(
    handler: type[_Handler], kube: KubeClient, switch: str
) -> None:
    setattr(handler, switch, True)
    for _ in range(3):
        meta = kube.get_resource_claim("ns", "c")["metadata"]
        assert (meta["name"], meta["uid"]) == ("c", "u")
    assert len(handler.connections) == 3


def test_error_status_keeps_the_connection_and_names_the_request(
    handler: type[_Handler], kube: KubeClient
) -> None:
    with pytest.raises(NotFoundError, match="resourceclaims/missing"):
        kube.get_resource_claim("ns", "missing")
    assert kube.get_resource_claim("ns", "c")["metadata"]["uid"] == "u"
    assert len(handler.connections) == 1


def test_a_server_that_resets_every_connection_is_a_retryable_error(
    handler: type[_Handler], kube: KubeClient
) -> None:
    assert kube.get_resource_claim("ns", "c")  # a kept-alive connection first
    handler.reset = True
    with pytest.raises(RetryableError, match="cannot reach the API server"):
        kube.get_resource_claim("ns", "c")
    handler.reset = False
    assert kube.get_resource_claim("ns", "c")["metadata"]["uid"] == "u"  # pool recovered


def test_a_too_deeply_nested_claim_is_the_claims_fault_not_bad_json(
    handler: type[_Handler], kube: KubeClient
) -> None:
    """Past orjson's 1,024 levels the standard decoder raises RecursionError, which the
    prepare pipeline reports as a claim nested too deeply (its own fault), not as an API
    server sending invalid JSON (an outage, retried)."""
    handler.body = b'{"x":' + b"[" * 1100 + b"]" * 1100 + b"}"
    with pytest.raises(RecursionError):
        kube.get_resource_claim("ns", "c")
    handler.body = b'{"metadata": '
    with pytest.raises(RetryableError, match="invalid JSON"):
        kube.get_resource_claim("ns", "c")
