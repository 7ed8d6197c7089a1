"""The HTTPS admission server: TLS from files (reloaded when they change), three paths.

* ``POST /mutate-pods``: pods, answered by :meth:`AdmissionEngine.mutate_pod`;
* ``POST /validate-claims``: ResourceClaims, ResourceClaimTemplates and DeviceClasses,
  answered by :meth:`AdmissionEngine.validate`;
* ``GET /healthz``: ``ok``.

This module is transport only: it parses AdmissionReviews, calls the engine through the
:class:`AdmissionEngine` protocol and writes the answer; what to admit is the engine's
business (``drakit.webhook.admission``). Certificate and key are re-read when either file's size or
modification time changes (cert-manager rotates them in place), checked on each new
connection; a pair that fails to load (half written) keeps the previous one in use.

Callers: with a client CA (``client_ca``), the admission paths answer only a caller that
presents a certificate signed by it, and, with ``client_names``, whose subject common name or
a DNS name is one of them (401 without a certificate, 403 for another name); ``/healthz`` stays
open to the kubelet's probes. The API server presents one when its AdmissionConfiguration
gives it a kubeconfig for the webhook (``docs/webhook.md``). The engine has no side effects, so
an unauthenticated caller learns what the webhook would answer and changes nothing; the check
keeps even that to the API server.

Bounded: at most :data:`MAX_CONNECTIONS` connections are served at once (one more is closed at
once, logged), and each request must arrive whole, TLS handshake, headers and body, within
:data:`REQUEST_DEADLINE` seconds of the connection being accepted or of the previous answer on
it (an idle keep-alive connection is closed after as long): a client that sends a byte now and
then holds a thread for that long at most, never for good.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from drakit.webhook.review import AdmissionRequest, AdmissionResponse, parse_review, to_review

__all__ = ["MAX_BODY", "MAX_CONNECTIONS", "REQUEST_DEADLINE", "AdmissionEngine", "WebhookServer"]

log = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024
"""Largest AdmissionReview accepted (objects are at most ~1.5 MiB in etcd)."""

_IO_TIMEOUT = 30.0
MAX_CONNECTIONS = 64
"""Connections served at once (the API server opens a few; more is a client misbehaving)."""
REQUEST_DEADLINE = 10.0
"""Seconds for a request to arrive whole (handshake, headers, body); the API server's own
webhook timeout is 10 s by default, so a request slower than this is answered in vain."""


class AdmissionEngine(Protocol):
    """What the server calls; implemented by :class:`drakit.webhook.admission.Admission`."""

    def mutate_pod(self, request: AdmissionRequest) -> AdmissionResponse:
        """Answer a pod admission (may patch the pod)."""
        ...

    def validate(self, request: AdmissionRequest) -> AdmissionResponse:
        """Answer a ResourceClaim, ResourceClaimTemplate or DeviceClass admission."""
        ...


class _Certificates:
    """An SSL context for a cert/key pair, rebuilt when the files change."""

    def __init__(self, cert_file: Path, key_file: Path, client_ca: Path | None = None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca = client_ca
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._context: ssl.SSLContext | None = None
        self.reloads = 0
        self.current()  # fail at start-up, not at the first connection

    def _stat(self) -> tuple[int, ...]:
        c, k = os.stat(self.cert_file), os.stat(self.key_file)
        stamp: tuple[int, ...] = (c.st_mtime_ns, c.st_size, k.st_mtime_ns, k.st_size)
        if self.client_ca is not None:
            a = os.stat(self.client_ca)
            stamp += (a.st_mtime_ns, a.st_size)
        return stamp

    def current(self) -> ssl.SSLContext:
        """The context for the files as they are now."""
        with self._lock:
            try:
                stamp = self._stat()
            except OSError:
                if self._context is None:
                    raise
                return self._context
            if stamp == self._stamp and self._context is not None:
                return self._context
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file)
                if self.client_ca is not None:
                    # optional at the handshake (the kubelet's probes have no certificate);
                    # required on the admission paths (_Handler._caller_refused)
                    ctx.verify_mode = ssl.CERT_OPTIONAL
                    ctx.load_verify_locations(cafile=str(self.client_ca))
            except (OSError, ssl.SSLError):
                if self._context is None:
                    raise
                log.warning("certificate reload failed; keeping the previous one", exc_info=True)
                return self._context
            if self._context is not None:
                log.info("certificate reloaded from %s", self.cert_file)
                self.reloads += 1
            self._context, self._stamp = ctx, stamp
            return ctx


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        # headers and body go out as separate writes: without TCP_NODELAY, Nagle's algorithm
        # and the client's delayed ACK hold the body back ~40 ms
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(_IO_TIMEOUT)
        self._timer: threading.Timer | None = None
        self._arm()
        self.request.do_handshake()
        super().setup()

    def _arm(self) -> None:
        """Close the connection unless a whole request arrives within the deadline."""
        self._disarm()
        timer = threading.Timer(self.server.request_deadline, self._expire)
        timer.daemon = True
        timer.start()
        self._timer = timer

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        deadline = self.server.request_deadline
        log.info("closing %s: no whole request in %.0fs", self.client_address[0], deadline)
        # the plain socket's shutdown (not SSLSocket's, which drops its TLS state under the
        # reading thread): the blocked read returns at once and the handler ends
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.request, socket.SHUT_RDWR)

    def handle_one_request(self) -> None:
        self._arm()  # also bounds an idle keep-alive connection
        super().handle_one_request()

    def finish(self) -> None:
        self._disarm()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _caller_refused(self) -> bool:
        """Answer 401/403 and return ``True`` when client authentication is on and fails."""
        if self.server.certificates.client_ca is None:
            return False
        cert = self.request.getpeercert()
        self.close_connection = True  # its body is not read; the answer ends the connection
        if not cert:
            self._send(HTTPStatus.UNAUTHORIZED, b"a client certificate is required\n", "text/plain")
            return True
        allowed = self.server.client_names
        if allowed and not (_cert_names(cert) & allowed):
            log.warning(
                "refusing a caller from %s: its certificate names %s, not one of %s",
                self.client_address[0],
                sorted(_cert_names(cert)),
                sorted(allowed),
            )
            self._send(
                HTTPStatus.FORBIDDEN, b"this client may not call the webhook\n", "text/plain"
            )
            return True
        self.close_connection = False
        return False

    def do_POST(self) -> None:
        if self._caller_refused():
            return
        route = {
            "/mutate-pods": self.server.engine.mutate_pod,
            "/validate-claims": self.server.engine.validate,
        }.get(self.path.split("?", 1)[0])
        if route is None:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._send(HTTPStatus.BAD_REQUEST, b"a body of 1 byte to 8 MiB is required\n")
            return
        body = self.rfile.read(length)
        self._disarm()  # the request is here: answering it is the engine's time, not the client's
        if len(body) < length:
            return  # the deadline closed the connection mid-body
        try:
            request = parse_review(body)
        except ValueError as e:  # pydantic's ValidationError is a ValueError too
            self._send(HTTPStatus.BAD_REQUEST, f"bad AdmissionReview: {e}\n".encode())
            return
        try:
            response = route(request)
        except Exception:  # an engine bug must not kill the server; the API server's
            # failurePolicy decides what a failed call means
            log.exception("admission of %s %s failed", request.kind.kind, request.uid)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, b"admission failed; see the log\n")
            return
        self._send(HTTPStatus.OK, json.dumps(to_review(request.uid, response)).encode())


def _cert_names(cert: Any) -> set[str]:
    """A verified peer certificate's subject common names and DNS names."""
    names = {
        str(value) for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"
    }
    names |= {str(v) for k, v in cert.get("subjectAltName", ()) if k == "DNS"}
    return names


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    client_names: frozenset[str] = frozenset()
    request_queue_size = 128  # the listen backlog (socketserver's default is 5)
    engine: AdmissionEngine
    certificates: _Certificates
    request_deadline: float = REQUEST_DEADLINE
    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning(
                "refusing a connection from %s: %d connections are open already",
                client_address[0] if client_address else "?",
                MAX_CONNECTIONS,
            )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        try:
            ctx = self.certificates.current()
        except (OSError, ssl.SSLError):
            conn.close()
            raise
        # the handshake runs in the connection's own thread (_Handler.setup)
        return ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)  # noqa: LOG014 - called from socketserver's except block


class WebhookServer:
    """The admission server. ``serve_forever()`` in a thread, ``shutdown()`` to stop.

    Args:
        engine: answers the admissions.
        cert_file: PEM certificate chain (reloaded when it changes).
        key_file: PEM private key.
        address: listen address.
        port: listen port; 0 picks a free one (see :attr:`port`).
        max_connections: connections served at once (:data:`MAX_CONNECTIONS`).
        request_deadline: seconds for a whole request (:data:`REQUEST_DEADLINE`).
        client_ca: PEM CA bundle; when given, the admission paths need a client certificate
            signed by it (reloaded when it changes).
        client_names: with ``client_ca``, the certificate's common name or a DNS name must be
            one of these (empty: any the CA signed).

    Raises:
        OSError / ssl.SSLError: the certificate or key cannot be loaded, or the port is taken.
    """

    def __init__(
        self,
        engine: AdmissionEngine,
        cert_file: Path,
        key_file: Path,
        *,
        address: str = "0.0.0.0",  # noqa: S104 - a webhook pod serves on its pod IP
        port: int = 8443,
        max_connections: int = MAX_CONNECTIONS,
        request_deadline: float = REQUEST_DEADLINE,
        client_ca: Path | None = None,
        client_names: frozenset[str] = frozenset(),
    ) -> None:
        self.certificates = _Certificates(
            Path(cert_file), Path(key_file), Path(client_ca) if client_ca else None
        )
        self._server = _Server((address, port), _Handler)
        self._server.engine = engine
        self._server.certificates = self.certificates
        self._server.slots = threading.BoundedSemaphore(max_connections)
        self._server.request_deadline = request_deadline
        self._server.client_names = frozenset(client_names)

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown`."""
        self._server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
