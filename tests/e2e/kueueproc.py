"""The real Kueue manager (``sigs.k8s.io/kueue``, built by ``hack/kueue/build.sh``) against the
test control plane.

:func:`resolve_kueue_dir` finds (or builds) the cached binary and CRDs. :class:`KueueManager`
installs what a Kueue deployment installs, from the module's own ``config/`` tree, and runs the
manager as a plain process on loopback:

* the CRDs (``config/components/crd/bases``) with the conversion webhooks the release's
  kustomization adds (``config/components/crd/patches/webhook_in_*.yaml``);
* the Mutating- and ValidatingWebhookConfiguration of ``config/components/webhook/manifests.yaml``,
  restricted to the webhooks of Kueue's own objects and of ``batch/v1`` Jobs and to namespaces
  labelled :data:`KUEUE_NAMESPACE_LABEL`, so the manager never sees another test's pods;
* the webhook ``Secret`` Kueue's internal certificate management reads.

The API server has no route to a Service (no kube-proxy, no endpoints on loopback), so every
``service`` reference becomes a ``url`` on ``https://127.0.0.1:<port>``. Kueue's internal
certificate management (its default) stays on: the Secret is seeded with a CA named
``kueue-ca`` and a serving certificate for both ``kueue-webhook-service.kueue-system.svc`` (what
Kueue checks) and ``127.0.0.1`` (what the API server dials); Kueue accepts it as valid and
injects the CA into the webhook configurations and the CRDs itself; the files go to its
``certDir`` as a Secret volume would put them there.

The manager runs as the admin user (``system:masters``), not with the ServiceAccount and
ClusterRole of ``config/components/rbac``. :meth:`KueueManager.stop` deletes the webhook
configurations and the CRDs, so nothing of Kueue outlives it in the shared control plane.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path
from typing import IO, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, free_port, wait_for

__all__ = [
    "KUEUE_NAMESPACE",
    "KUEUE_NAMESPACE_LABEL",
    "KueueError",
    "KueueManager",
    "resolve_kueue_dir",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "kueue" / "build.sh"
KUEUE_NAMESPACE = "kueue-system"
#: Kueue's webhooks act only on namespaces with this label (set it on a test's namespace).
KUEUE_NAMESPACE_LABEL = "kueue.drakit.io/e2e"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
API = "kueue.x-k8s.io/v1beta2"
#: The conversion webhooks of ``config/components/crd/kustomization.yaml``.
CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
#: API groups whose webhooks are installed: Kueue's own objects and ``batch/v1`` Jobs.
WEBHOOK_GROUPS = frozenset({"kueue.x-k8s.io", "batch"})


class KueueError(RuntimeError):
    """Kueue could not be built, installed or started."""


def resolve_kueue_dir(*, build: bool = True, timeout: float = 3600.0) -> Path:
    """The directory with ``bin/kueue`` and ``crd/`` (``DRAKIT_KUEUE_DIR`` or the build cache).

    With ``build`` the build script runs (a no-op when the cache is warm); without it only the
    cache's path is computed, and a missing binary is an error.
    """
    args = [str(BUILD_SCRIPT)] + ([] if build else ["--print-dir"])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise KueueError(f"{BUILD_SCRIPT.relative_to(REPO_ROOT)} failed: {last}")
    out = Path(proc.stdout.strip())
    if not (out / "bin" / "kueue").is_file():
        raise KueueError(f"no Kueue binary at {out}/bin/kueue; run {BUILD_SCRIPT}")
    return out


@dataclass(frozen=True)
class _Pki:
    ca_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _make_pki(days: int = 365) -> _Pki:
    """A CA Kueue's rotator accepts (``kueue-ca``, RSA in PKCS#1, valid past its 90-day look-ahead)
    and a serving certificate for the Service's DNS name and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "kueue-ca"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kueue"),
        ]
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("kueue-ca")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    dns = f"{WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc"
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(dns), x509.IPAddress(IPv4Address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pkcs1 = serialization.PrivateFormat.TraditionalOpenSSL
    none = serialization.NoEncryption()
    pem = serialization.Encoding.PEM
    return _Pki(
        ca.public_bytes(pem),
        ca_key.private_bytes(pem, pkcs1, none),
        cert.public_bytes(pem),
        key.private_bytes(pem, pkcs1, none),
    )


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the forked child
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


@dataclass
class KueueManager:
    """Kueue installed in ``cp`` and its manager running; use as a context manager.

    Args:
        cp: The control plane.
        kueue_dir: :func:`resolve_kueue_dir`'s answer.
        device_class_mappings: ``resources.deviceClassMappings`` of Kueue's Configuration:
            logical resource name -> DeviceClass names.
        feature_gates: Kueue feature gates (``DynamicResourceAllocation`` is alpha and off in
            v0.17, so it is on here by default).
        run_dir: Where the configuration, certificates and the log go.
    """

    cp: ControlPlane
    kueue_dir: Path
    device_class_mappings: Mapping[str, Sequence[str]]
    run_dir: Path
    feature_gates: Mapping[str, bool] = field(
        default_factory=lambda: {"DynamicResourceAllocation": True, "VisibilityOnDemand": False}
    )
    started_in: float = 0.0
    _proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None
    _installed: list[str] = field(default_factory=list)

    @property
    def log_file(self) -> Path:
        return self.run_dir / "kueue.log"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def __enter__(self) -> KueueManager:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ install
    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        status, data = self.cp._http("POST", self.cp.server + path, body)
        if status == 409:
            raise KueueError(
                f"{body['kind']} {body['metadata']['name']} already exists: another Kueue "
                "fixture did not clean up (delete it, or restart the control plane)"
            )
        if status not in (200, 201):
            raise KueueError(f"POST {path}: HTTP {status}: {data[:400]!r}")
        self._installed.append(f"{path}/{body['metadata']['name']}")
        return dict(json.loads(data))

    def _crds(self, url: str, ca: str) -> Iterator[dict[str, Any]]:
        for path in sorted((self.kueue_dir / "crd").glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            plural = crd["spec"]["names"]["plural"]
            if plural in CONVERTED_CRDS:  # config/components/crd/patches/webhook_in_<plural>.yaml
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{url}/convert", "caBundle": ca},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            yield crd

    def _webhook_configurations(self, url: str, ca: str) -> Iterator[dict[str, Any]]:
        manifests = self.kueue_dir / "webhook" / "manifests.yaml"
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc:
                continue
            kept = []
            for hook in doc["webhooks"]:
                groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
                if not groups <= WEBHOOK_GROUPS:
                    continue
                service = hook["clientConfig"].pop("service")
                hook["clientConfig"] = {"url": f"{url}{service['path']}", "caBundle": ca}
                hook["namespaceSelector"] = {"matchLabels": {KUEUE_NAMESPACE_LABEL: "true"}}
                kept.append(hook)
            # kustomize's namePrefix "kueue-" (config/default), which Kueue's cert code expects
            doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
            doc["webhooks"] = kept
            yield doc

    def _config(self, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": WEBHOOK_SERVICE,
                "webhookSecretName": WEBHOOK_SECRET,
            },
            "integrations": {"frameworks": ["batch/job"]},
            "featureGates": dict(self.feature_gates),
            "resources": {
                "deviceClassMappings": [
                    {"name": name, "deviceClassNames": list(classes)}
                    for name, classes in self.device_class_mappings.items()
                ]
            },
        }

    def start(self) -> None:
        """Install the CRDs, webhooks and Secret, start the manager, wait for ``/readyz``."""
        begin = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        cert_dir = self.run_dir / "certs"
        cert_dir.mkdir(mode=0o700, exist_ok=True)
        pki = _make_pki()
        ca = _b64(pki.ca_pem)
        webhook_port, health_port = free_port(), free_port()
        url = f"https://127.0.0.1:{webhook_port}"

        for crd in self._crds(url, ca):
            self._post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        for kind, conf in zip(
            ("mutating", "validating"), self._webhook_configurations(url, ca), strict=True
        ):
            self._post(f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations", conf)
        status, _ = self.cp._http("GET", f"{self.cp.server}/api/v1/namespaces/{KUEUE_NAMESPACE}")
        if status == 404:
            self.cp.create_namespace(KUEUE_NAMESPACE)
        self._post(
            f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": WEBHOOK_SECRET, "namespace": KUEUE_NAMESPACE},
                "data": {
                    "ca.crt": ca,
                    "ca.key": _b64(pki.ca_key_pem),
                    "tls.crt": _b64(pki.cert_pem),
                    "tls.key": _b64(pki.key_pem),
                },
            },
        )
        # what the kubelet's Secret volume would hold in a Pod: Kueue's rotator waits for the
        # files in its certDir and serves them
        for fname, data in (
            ("tls.crt", pki.cert_pem),
            ("tls.key", pki.key_pem),
            ("ca.crt", pki.ca_pem),
        ):
            (cert_dir / fname).write_bytes(data)
            (cert_dir / fname).chmod(0o600)
        self._wait_crds_established()

        config_file = self.run_dir / "config.yaml"
        config_file.write_text(yaml.safe_dump(self._config(webhook_port, health_port, cert_dir)))
        argv = [
            str(self.kueue_dir / "bin" / "kueue"),
            f"--config={config_file}",
            f"--kubeconfig={self.cp.kubeconfig}",
            "--zap-log-level=2",
        ]
        self._log = self.log_file.open("ab")
        self._log.write(("$ " + " ".join(argv) + "\n").encode())
        self._log.flush()
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self._proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - no threads are involved
        )
        wait_for(
            lambda: self._ready(health_port),
            timeout=120,
            interval=0.5,
            what=f"Kueue's /readyz on 127.0.0.1:{health_port} (log: {self.log_file})",
        )
        self.started_in = time.monotonic() - begin

    def _wait_crds_established(self) -> None:
        def established() -> bool:
            for plural in (
                "clusterqueues",
                "localqueues",
                "workloads",
                "resourceflavors",
                "topologies",
            ):
                crd = self.cp.api(
                    "GET",
                    f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.kueue.x-k8s.io",
                )
                conds = {
                    c["type"]: c["status"]
                    for c in (crd.get("status") or {}).get("conditions") or []
                }
                if conds.get("Established") != "True":
                    return False
            return True

        wait_for(established, timeout=60, interval=0.2, what="Kueue's CRDs to be established")

    def _ready(self, port: int) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            tail = "\n".join(self.log().splitlines()[-15:])
            raise KueueError(f"the Kueue manager exited with {self._proc.returncode}:\n{tail}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Remove the webhook configurations first (nothing may call a dead server), stop the
        manager (SIGTERM, 15 s, SIGKILL), then delete the CRDs, Secret and namespace."""
        for entry in list(reversed(self._installed)):
            if "webhookconfigurations" in entry:
                self._delete(entry)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        for entry in list(reversed(self._installed)):
            self._delete(entry)
        with contextlib.suppress(ControlPlaneError):
            self.cp.api("DELETE", f"/api/v1/namespaces/{KUEUE_NAMESPACE}")
        if self._log is not None:
            self._log.close()
            self._log = None

    def _delete(self, entry: str) -> None:
        status, data = self.cp._http("DELETE", self.cp.server + entry)
        if status not in (200, 202, 404):
            raise KueueError(f"DELETE {entry}: HTTP {status}: {data[:300]!r}")
        self._installed.remove(entry)
