"""A ``drakit webhook`` process with certificates made for it, for tests and the benchmark.

:func:`make_certificates` writes a CA and a server certificate for ``127.0.0.1`` with
``cryptography``; :class:`WebhookProcess` runs the real CLI with them and knows the
``caBundle`` an API server needs to call it.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path
from typing import IO, Any, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.e2e.controlplane import free_port

__all__ = [
    "Certificates",
    "WebhookProcess",
    "make_certificates",
    "sign_client_certificate",
    "webhook_configurations",
]


@dataclass(frozen=True)
class Certificates:
    """PEM files: the CA, and the server's certificate and key (and the CA's key)."""

    ca: Path
    cert: Path
    key: Path
    ca_key: Path | None = None

    @property
    def ca_bundle(self) -> str:
        """``clientConfig.caBundle``: the CA, base64."""
        return base64.b64encode(self.ca.read_bytes()).decode("ascii")

    def context(self) -> ssl.SSLContext:
        """A client context trusting only this CA."""
        return ssl.create_default_context(cafile=str(self.ca))


def make_certificates(directory: Path, *, common_name: str = "drakit-webhook") -> Certificates:
    """A fresh CA and a server certificate for 127.0.0.1 and localhost, valid for a day."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name}-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(IPv4Address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    out = Certificates(
        ca=directory / "ca.crt",
        cert=directory / "tls.crt",
        key=directory / "tls.key",
        ca_key=directory / "ca.key",
    )
    _write_key(directory / "ca.key", ca_key)
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    out.key.chmod(0o600)
    return out


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def sign_client_certificate(
    ca: Certificates, common_name: str, directory: Path
) -> tuple[Path, Path]:
    """A client certificate for ``common_name`` signed by ``ca``'s CA; (cert, key) files."""
    assert ca.ca_key is not None
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(ca.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_file, key_file = directory / "client.crt", directory / "client.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_file, key)
    return cert_file, key_file


def _drakit_argv() -> list[str]:
    script = Path(sys.executable).with_name("drakit")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from drakit.commands.cli import main; main()"]


class WebhookProcess:
    """``drakit webhook`` on 127.0.0.1 with ``certs``.

    Args:
        certs: its certificate and key (and the CA clients trust).
        kubeconfig: the API server it creates templates and events in.
        directory: where its configuration and log go.
        config: the drakit configuration (JSON-able; ``plugins`` names the backends).
        extra_args: further command-line flags (``--kueue``).
    """

    def __init__(
        self,
        certs: Certificates,
        kubeconfig: Path,
        directory: Path,
        *,
        config: dict[str, Any] | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.certs = certs
        self.port = free_port()
        self.config_path = directory / "webhook-config.yaml"
        self.config_path.write_text(json.dumps(config or {"plugins": ["cpu", "composite"]}))
        self.log_path = directory / "webhook.log"
        self.argv = [
            *_drakit_argv(),
            "-v",
            "webhook",
            f"--cert-file={certs.cert}",
            f"--key-file={certs.key}",
            "--address=127.0.0.1",
            f"--port={self.port}",
            f"--config={self.config_path}",
            f"--kubeconfig={kubeconfig}",
            *extra_args,
        ]
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self.port}"

    def log(self) -> str:
        """Its log so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def healthz(self, timeout: float = 2.0) -> int:
        """GET /healthz over TLS (verifying the certificate); the status code."""
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.certs.context(), timeout=timeout
        )
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status
        finally:
            conn.close()

    def start(self, timeout: float = 60.0) -> Self:
        """Start it and wait until /healthz answers."""
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"drakit webhook exited {self._proc.returncode}:\n{self.log()}")
            try:
                if self.healthz() == 200:
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"drakit webhook not serving after {timeout}s:\n{self.log()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Terminate it (SIGTERM, then SIGKILL)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def webhook_configurations(
    name: str, url: str, ca_bundle: str, namespace_labels: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Mutating- and ValidatingWebhookConfiguration that send drakit's objects to ``url``.

    Pods (CREATE) go to ``/mutate-pods`` and claims, templates and classes (CREATE, UPDATE) to
    ``/validate-claims``, from namespaces with ``namespace_labels`` (classes are cluster-wide:
    every one is sent). Both fail closed.
    """
    selector = {"matchLabels": namespace_labels}
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "pods.webhook.drakit.io",
                "clientConfig": {"url": f"{url}/mutate-pods", "caBundle": ca_bundle},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": selector,
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
                "reinvocationPolicy": "IfNeeded",
            }
        ],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "claims.webhook.drakit.io",
                "clientConfig": {"url": f"{url}/validate-claims", "caBundle": ca_bundle},
                "rules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["resourceclaims", "resourceclaimtemplates", "deviceclasses"],
                    }
                ],
                "namespaceSelector": selector,
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }
    return mutating, validating
