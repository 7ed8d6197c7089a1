"""A real Kubernetes control plane for end-to-end tests.

Runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler as plain
processes on free loopback ports: no containers, no kubelet. The binaries come
from ``hack/control-plane/build.sh`` (built from the Go module proxy and cached
under ``~/.cache/drakit/k8s``) or from ``DRAKIT_K8S_BIN_DIR``.

The module is independent of pytest so that it can be driven from a REPL or a
script when debugging::

    from tests.e2e.controlplane import ControlPlane, resolve_bin_dir
    cp = ControlPlane(resolve_bin_dir())
    cp.start()          # prints nothing; see cp.run_dir / "logs"
    cp.create_node("node-1")
    ...
    cp.stop()

Every process is started by this module and stopped by its PID, in reverse
start order, with SIGTERM and then SIGKILL. Children also get
``PR_SET_PDEATHSIG`` so they die with the test process if it is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "control-plane" / "build.sh"

#: Binaries the control plane needs; the kubelet stand-in and kubectl are optional.
REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
STANDIN_BINARY = "kubelet-standin"

#: DRA feature gates the tests want on. Only the ones that the built
#: kube-apiserver lists as *off by default* are passed (a gate that is unknown
#: to the binary is fatal at start-up, and GA/locked gates are hidden from
#: ``-h``). In 1.37.2 the core DRA features (consumable capacity,
#: partitionable devices, device taints, binding conditions, prioritized list,
#: admin access, extended resources) are already on by default; what remains is
#: alpha/beta-off work. ``DRAWorkloadResourceClaims`` is left out on purpose (a pod
#: claim that matches a PodGroup claim would then create no claim). ``GenericWorkload``
#: (PodGroups, gang scheduling; beta, off) and ``TopologyAwareWorkloadScheduling``
#: (a PodGroup's pods in one domain of a node label; alpha) are on for
#: ``tests/e2e/test_multinode.py``; they change nothing for pods outside a PodGroup.
WANTED_FEATURE_GATES = (
    "GenericWorkload",
    "TopologyAwareWorkloadScheduling",
    "DRAConsumableCapacity",
    "DRAPartitionableDevices",
    "DRADeviceTaints",
    "DRADeviceTaintRules",
    "DRADeviceBindingConditions",
    "DRAResourceClaimDeviceStatus",
    "DRAPrioritizedList",
    "DRAAdminAccess",
    "DRAExtendedResource",
    "DRAFractionalCapacityRange",
    "DRAListTypeAttributes",
    "DRANodeAllocatableResources",
    "DRADerivedAttributes",
    "DRADeviceCompatibilityGroups",
    "DRAOptionalNodeOperations",
    "DRAResourcePoolStatus",
    "DRAPartitionableDevicesType",
)

#: Alpha API versions served when any alpha DRA gate is enabled.
ALPHA_RUNTIME_CONFIG = ("resource.k8s.io/v1alpha3=true",)

#: API versions served when a gate in the key is enabled (beta APIs are off by default).
GATED_RUNTIME_CONFIG = {"GenericWorkload": "scheduling.k8s.io/v1beta1=true"}

# job-controller: Kueue's e2e runs batch/v1 Jobs (tests/e2e/test_kueue.py); nothing else makes Jobs.
CONTROLLERS = (
    "resourceclaim-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "job-controller",
)

WEBHOOK_CLIENT_NAME = "kube-apiserver-webhook-client"
"""The common name of the API server's client certificate for admission webhooks."""

_PR_SET_PDEATHSIG = 1
_GATE_LINE = re.compile(
    r"^\s*(?:kube:)?([A-Za-z0-9]+)=true\|false \((ALPHA|BETA|DEPRECATED) - default=(true|false)\)"
)


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached."""


def resolve_bin_dir(*, build: bool = True, timeout: float = 3600.0) -> Path:
    """Find (and if needed build) the directory holding the control-plane binaries.

    ``DRAKIT_K8S_BIN_DIR`` wins when set. Otherwise ``hack/control-plane/build.sh``
    is run; it is a quick no-op when the cache for the committed lock exists.

    Args:
        build: Whether a missing cache may be built (a cold build takes 15-30 min).
        timeout: Seconds to allow build.sh.

    Returns:
        The directory with ``etcd``, ``kube-apiserver``, ``kube-controller-manager``
        and ``kube-scheduler`` (and usually ``kubelet-standin`` and ``kubectl``).

    Raises:
        ControlPlaneError: With build.sh's one-line reason when nothing usable exists.
    """
    env_dir = os.environ.get("DRAKIT_K8S_BIN_DIR")
    if env_dir:
        bin_dir = Path(env_dir)
    else:
        args = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--print-bin-dir"])
        stdout, last_err, code = _run_streaming_stderr(args, timeout)
        if code != 0 or not stdout.strip():
            raise ControlPlaneError(last_err or f"{BUILD_SCRIPT} failed with exit code {code}")
        bin_dir = Path(stdout.strip().splitlines()[-1])
    missing = [b for b in REQUIRED_BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"{bin_dir} lacks {', '.join(missing)}; run hack/control-plane/build.sh or set "
            "DRAKIT_K8S_BIN_DIR=/dir/with/kube-apiserver,kube-controller-manager,kube-scheduler,etcd"
        )
    return bin_dir


def _run_streaming_stderr(args: list[str], timeout: float) -> tuple[str, str, int]:
    """Run a command, echoing its stderr live; return stdout, the last stderr line, exit code."""
    deadline = time.monotonic() + timeout
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    ) as proc:
        assert proc.stderr is not None
        assert proc.stdout is not None
        last = ""
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                last = line.strip()
            if time.monotonic() > deadline:
                proc.kill()
                last = f"{args[1]} timed out after {timeout:.0f}s"
                break
        stdout = proc.stdout.read()
        code = proc.wait()
    return stdout, last, code


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def default_feature_gates(apiserver: Path) -> dict[str, bool]:
    """Choose the feature gates to enable from what the binary itself lists.

    Args:
        apiserver: Path of the kube-apiserver binary.

    Returns:
        Gate name to ``True`` for each wanted gate that the binary knows and keeps
        off by default.
    """
    listed = listed_feature_gates(apiserver)
    return {name: True for name in WANTED_FEATURE_GATES if listed.get(name) is False}


def listed_feature_gates(apiserver: Path) -> dict[str, bool]:
    """Parse the ``--feature-gates`` section of ``kube-apiserver -h``.

    Args:
        apiserver: Path of the kube-apiserver binary.

    Returns:
        Each listed (alpha, beta or deprecated) gate with its default value. GA
        gates are not listed by the binary.
    """
    out = subprocess.run(
        [str(apiserver), "-h"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    gates: dict[str, bool] = {}
    for line in out.splitlines():
        match = _GATE_LINE.match(line)
        if match:
            gates[match.group(1)] = match.group(3) == "true"
    return gates


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _has_default_route() -> bool:
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return True
    return any(line.split()[1] == "00000000" for line in lines if len(line.split()) > 1)


@dataclass
class Component:
    """One running control-plane process.

    Attributes:
        name: Short name, also the log file stem.
        process: The process handle.
        log_path: Where its stdout and stderr go.
        ready_seconds: Time from start until its health endpoint answered.
    """

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    ready_seconds: float = 0.0


@dataclass
class StartupReport:
    """Timings of one start-up, for the test-run summary.

    Attributes:
        total_seconds: From the first process start until everything was ready.
        components: Seconds until each component was ready.
        feature_gates: The ``--feature-gates`` value passed to all components.
        runtime_config: The ``--runtime-config`` value passed to kube-apiserver.
    """

    total_seconds: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    feature_gates: str = ""
    runtime_config: str = ""


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback.

    Args:
        bin_dir: Directory with the binaries (see :func:`resolve_bin_dir`).
        run_dir: Directory for state and logs of this run; created. Defaults to a
            fresh ``run-<time>-<pid>`` under ``$DRAKIT_E2E_DIR`` (default
            ``/tmp/drakit-e2e``). Kept after :meth:`stop` (minus etcd data) so logs
            can be read.
        feature_gates: Gates for all components; default: :func:`default_feature_gates`.
        runtime_config: Extra ``--runtime-config`` entries; default: the alpha
            ``resource.k8s.io`` version when an alpha DRA gate is on.
        extra_args: Extra command-line arguments per component name.
        start_timeout: Seconds to wait for each component to become ready.
        disabled_admission: Admission plugins switched off. By default ``ServiceAccount`` (the
            tests' pods never run, and their namespaces have no ServiceAccount) and
            ``TaintNodesByCondition`` (fake Nodes stay schedulable).
    """

    def __init__(
        self,
        bin_dir: Path,
        run_dir: Path | None = None,
        *,
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Sequence[str] | None = None,
        extra_args: Mapping[str, Sequence[str]] | None = None,
        start_timeout: float = 120.0,
        disabled_admission: Sequence[str] = ("ServiceAccount", "TaintNodesByCondition"),
    ) -> None:
        self._disabled_admission = list(disabled_admission)
        self.bin_dir = bin_dir
        self.run_dir = run_dir if run_dir is not None else new_run_dir()
        self.logs_dir = self.run_dir / "logs"
        self._feature_gates = dict(feature_gates) if feature_gates is not None else None
        self._runtime_config = list(runtime_config) if runtime_config is not None else None
        self._extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self._start_timeout = start_timeout
        self._components: list[Component] = []
        self.token = secrets.token_hex(24)
        self.api_port = 0
        self.report = StartupReport()

    # ------------------------------------------------------------------ paths

    @property
    def server(self) -> str:
        """The API server URL (``https://127.0.0.1:<port>``)."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        """Path of the admin kubeconfig written at start-up."""
        return self.run_dir / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The apiserver's self-signed serving certificate (also its CA)."""
        return self.run_dir / "pki" / "apiserver.crt"

    def binary(self, name: str) -> Path:
        """Return the path of a binary in :attr:`bin_dir`."""
        return self.bin_dir / name

    # -------------------------------------------------------------- lifecycle

    def start(self) -> StartupReport:
        """Start all four components and wait until each one is healthy.

        Returns:
            The start-up timings.

        Raises:
            ControlPlaneError: If a component exits or does not become ready; all
                started processes are stopped first.
        """
        began = time.monotonic()
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise
        self.report.total_seconds = time.monotonic() - began
        self.report.components = {c.name: round(c.ready_seconds, 2) for c in self._components}
        (self.run_dir / "startup.json").write_text(json.dumps(asdict(self.report), indent=2))
        return self.report

    def _start_all(self) -> None:
        for sub in ("pki", "logs", "etcd"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        gates = self._feature_gates
        if gates is None:
            gates = default_feature_gates(self.binary("kube-apiserver"))
        gate_arg = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))
        runtime_config = self._runtime_config
        if runtime_config is None:
            listed = listed_feature_gates(self.binary("kube-apiserver")) if gates else {}
            alpha = any(k in listed and v for k, v in gates.items())
            runtime_config = list(ALPHA_RUNTIME_CONFIG) if alpha else []
            runtime_config += [v for k, v in GATED_RUNTIME_CONFIG.items() if gates.get(k)]
        self.report.feature_gates = gate_arg
        self.report.runtime_config = ",".join(runtime_config)
        gate_flags = [f"--feature-gates={gate_arg}"] if gate_arg else []

        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                "--name=e2e",
                f"--data-dir={self.run_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--listen-metrics-urls=",
            ],
        )
        self._wait_ready(etcd, f"{etcd_url}/health", auth=False)

        pki = self.run_dir / "pki"
        (pki / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        self._make_sa_key(pki)
        admission_config = self._make_webhook_client(pki)
        self.api_port = free_port()
        api_args = [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--cert-dir={pki}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            f"--disable-admission-plugins={','.join(self._disabled_admission)}",
            f"--admission-control-config-file={admission_config}",
            "--allow-privileged=true",
            *gate_flags,
        ]
        if runtime_config:
            api_args.append(f"--runtime-config={','.join(runtime_config)}")
        if not _has_default_route():
            # Without a default route the apiserver cannot pick an advertise
            # address; loopback is rejected, so give it a documentation address.
            api_args.append("--advertise-address=192.0.2.10")
        apiserver = self._spawn("kube-apiserver", api_args)
        self._wait_ready(apiserver, f"{self.server}/readyz", auth=True)
        self._write_kubeconfig()

        scheduler_config = self.run_dir / "scheduler.yaml"
        scheduler_config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(self.kubeconfig),
                        "qps": 200,
                        "burst": 400,
                    },
                    "leaderElection": {"leaderElect": False},
                },
                indent=2,
            )
        )
        kcm_port, sched_port = free_port(), free_port()
        kcm = self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--controllers={','.join(CONTROLLERS)}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                *gate_flags,
            ],
        )
        scheduler = self._spawn(
            "kube-scheduler",
            [
                f"--config={scheduler_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                *gate_flags,
            ],
        )
        self._wait_ready(kcm, f"https://127.0.0.1:{kcm_port}/healthz", auth=False)
        self._wait_ready(scheduler, f"https://127.0.0.1:{sched_port}/healthz", auth=False)
        self._wait_for_default_namespace()

    def stop(self) -> None:
        """Stop every started process by PID (reverse start order) and drop etcd data.

        Safe to call more than once and after a failed start.
        """
        while self._components:
            component = self._components.pop()
            proc = component.process
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    logger.warning("%s (pid %d) ignored SIGTERM; killing", component.name, proc.pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=15)
            component.log_file.close()
        shutil.rmtree(self.run_dir / "etcd", ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pids(self) -> dict[str, int]:
        """Return the PID of each running component."""
        return {c.name: c.process.pid for c in self._components}

    def restart_apiserver(self) -> float:
        """Stop kube-apiserver (SIGTERM) and start it again with the same arguments and etcd.

        Every client's watch breaks and reconnects, as after an upgrade of the control plane.

        Returns:
            When the new process was started (``time.monotonic()``); it is ready on return.
        """
        component = next(c for c in self._components if c.name == "kube-apiserver")
        old = component.process
        with contextlib.suppress(ProcessLookupError):
            os.kill(old.pid, signal.SIGTERM)
        try:
            old.wait(timeout=30)
        except subprocess.TimeoutExpired:
            old.kill()
            old.wait(timeout=15)
        component.process = subprocess.Popen(
            [str(a) for a in old.args],  # type: ignore[union-attr]
            stdin=subprocess.DEVNULL,
            stdout=component.log_file,
            stderr=subprocess.STDOUT,
            cwd=self.run_dir,
            start_new_session=True,
            preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - a fresh child, like the first start
        )
        spawned = component.ready_seconds = time.monotonic()
        self._wait_ready(component, f"{self.server}/readyz", auth=True)
        return spawned

    def check_alive(self) -> None:
        """Raise if a component has exited since start-up.

        Raises:
            ControlPlaneError: Naming the component, its exit code and its log.
        """
        for c in self._components:
            code = c.process.poll()
            if code is not None:
                raise ControlPlaneError(f"{c.name} exited with {code}; log: {c.log_path}")

    # ---------------------------------------------------------------- helpers

    def _spawn(self, name: str, args: list[str]) -> Component:
        log_path = self.logs_dir / f"{name}.log"
        log_file = log_path.open("ab")
        argv = [str(self.binary(name)), *args, *self._extra_args.get(name, [])]
        log_file.write(("$ " + " ".join(argv) + "\n").encode())
        log_file.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=self.run_dir,
            start_new_session=True,
            preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - no threads run while the fixture starts
        )
        component = Component(name=name, process=proc, log_path=log_path, log_file=log_file)
        component.ready_seconds = time.monotonic()
        self._components.append(component)
        return component

    def _wait_ready(self, component: Component, url: str, *, auth: bool) -> None:
        started = component.ready_seconds
        deadline = started + self._start_timeout
        last = ""
        while time.monotonic() < deadline:
            code = component.process.poll()
            if code is not None:
                raise ControlPlaneError(
                    f"{component.name} exited with {code} during start-up: "
                    f"{_tail(component.log_path)} (log: {component.log_path})"
                )
            try:
                status, body = self._http("GET", url, auth=auth, timeout=5)
                if status == 200:
                    component.ready_seconds = time.monotonic() - started
                    logger.info("%s ready after %.1fs", component.name, component.ready_seconds)
                    return
                last = f"HTTP {status}: {body[:200]!r}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ControlPlaneError(
            f"{component.name} not ready after {self._start_timeout:.0f}s ({last}); "
            f"log: {component.log_path}"
        )

    def _wait_for_default_namespace(self) -> None:
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            status, _ = self._http("GET", f"{self.server}/api/v1/namespaces/default", timeout=5)
            if status == 200:
                return
            time.sleep(0.2)
        raise ControlPlaneError("namespace 'default' never appeared")

    def _make_sa_key(self, pki: Path) -> None:
        key, pub = pki / "sa.key", pki / "sa.pub"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
            check=True,
            capture_output=True,
            timeout=60,
        )

    @property
    def webhook_client_ca(self) -> Path:
        """The CA of the client certificate the API server presents to admission webhooks."""
        return self.run_dir / "pki" / "webhook-client-ca.crt"

    def _make_webhook_client(self, pki: Path) -> Path:
        """A client certificate (CN :data:`WEBHOOK_CLIENT_NAME`) that the API server presents
        to every admission webhook, through its AdmissionConfiguration; the config's path.

        As a cluster operator gives the API server a kubeconfig for webhooks; a webhook that
        does not ask for a client certificate never sees it.
        """
        ca, ca_key = self.webhook_client_ca, pki / "webhook-client-ca.key"
        cert, key, csr = pki / "webhook-client.crt", pki / "webhook-client.key", pki / "wc.csr"
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        ca_subject = "/CN=drakit-e2e-webhook-client-ca"
        steps: list[list[str | Path]] = [
            ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-subj", ca_subject, "-days", "2"],
            ["req", *ec, "-keyout", key, "-out", csr, "-subj", f"/CN={WEBHOOK_CLIENT_NAME}"],
            ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-out", cert, "-days", "2"],
        ]
        for step in steps:
            argv = ["openssl", *(str(a) for a in step)]
            subprocess.run(argv, check=True, capture_output=True, timeout=60)
        kubeconfig = pki / "admission-kubeconfig.json"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "users": [
                        {
                            "name": "*",
                            "user": {"client-certificate": str(cert), "client-key": str(key)},
                        }
                    ],
                }
            )
        )
        webhook = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig),
        }
        config = pki / "admission-config.json"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "AdmissionConfiguration",
                    "plugins": [
                        {"name": "ValidatingAdmissionWebhook", "configuration": webhook},
                        {"name": "MutatingAdmissionWebhook", "configuration": webhook},
                    ],
                }
            )
        )
        return config

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "drakit-e2e",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "drakit-e2e", "context": {"cluster": "drakit-e2e", "user": "admin"}}
            ],
            "current-context": "drakit-e2e",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))
        self.kubeconfig.chmod(0o600)

    def _ssl_context(self, *, verify: bool) -> ssl.SSLContext:
        if verify and self.ca_file.exists():
            return ssl.create_default_context(cafile=str(self.ca_file))
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _http(
        self,
        method: str,
        url: str,
        body: Mapping[str, Any] | None = None,
        *,
        auth: bool = True,
        timeout: float = 30,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            # compact with sorted keys, as kubectl sends it: the API server keeps opaque config
            # parameters as the raw JSON it was given and, in 1.37.2, refuses every later
            # patch of the claim's status when that JSON is not in this form (see
            # KubeClient.apply_claim_device_status)
            data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
        ctx = None
        if url.startswith("https://"):
            ctx = self._ssl_context(verify=url.startswith(self.server) and self.api_port != 0)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code), bytes(exc.read())

    def api(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Call the API server as admin and decode the JSON reply.

        Args:
            method: HTTP method.
            path: Absolute API path, e.g. ``/api/v1/nodes``.
            body: JSON body, if any.

        Returns:
            The decoded reply.

        Raises:
            ControlPlaneError: On a non-2xx status.
        """
        status, data = self._http(method, self.server + path, body)
        if not 200 <= status < 300:
            raise ControlPlaneError(f"{method} {path}: HTTP {status}: {data[:500]!r}")
        decoded: dict[str, Any] = json.loads(data) if data else {}
        return decoded

    def get_text(self, path: str) -> str:
        """GET a non-JSON endpoint (``/metrics``, ``/readyz?verbose``) as admin.

        Raises:
            ControlPlaneError: On a non-2xx status.
        """
        status, data = self._http("GET", self.server + path)
        if not 200 <= status < 300:
            raise ControlPlaneError(f"GET {path}: HTTP {status}: {data[:500]!r}")
        return data.decode()

    # ------------------------------------------------------------------ nodes

    def create_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        cpu: str = "8",
        memory: str = "32Gi",
        pods: str = "110",
        extra_allocatable: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a schedulable fake Node (no taints; status set at create time).

        Nothing keeps its heartbeat fresh, which does not matter: no node
        lifecycle controller runs, and the scheduler does not read conditions.

        Args:
            name: Node name (also the ``kubernetes.io/hostname`` label).
            labels: Extra labels.
            cpu: Capacity and allocatable CPU.
            memory: Capacity and allocatable memory.
            pods: Capacity and allocatable pod count.
            extra_allocatable: Further capacity/allocatable entries.

        Returns:
            The created Node as JSON.
        """
        resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extra_allocatable or {})}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    **(labels or {}),
                },
            },
            "spec": {},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake node of the drakit e2e harness",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
            },
        }
        created = self.api("POST", "/api/v1/nodes", node)
        taints = created.get("spec", {}).get("taints")
        if taints:
            raise ControlPlaneError(
                f"node {name} got taints {taints}; is TaintNodesByCondition on?"
            )
        return created

    def delete_node(self, name: str) -> None:
        """Delete a node and the ResourceSlices published for it (ignores NotFound)."""
        selector = urllib.parse.quote(f"spec.nodeName={name}")
        for path in (
            f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={selector}",
            f"/api/v1/nodes/{name}",
        ):
            status, data = self._http("DELETE", self.server + path)
            if status not in (200, 202, 404):
                raise ControlPlaneError(f"DELETE {path}: HTTP {status}: {data[:300]!r}")

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """Create a namespace."""
        meta: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
        self.api(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": meta},
        )

    def delete_namespace(self, name: str) -> None:
        """Force-delete a namespace's pods, then delete the namespace.

        Without a kubelet, gracefully deleted pods never go away, so they are deleted with
        ``gracePeriodSeconds=0`` first.
        """
        self.api(
            "DELETE",
            f"/api/v1/namespaces/{name}/pods",
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
        )
        self.api("DELETE", f"/api/v1/namespaces/{name}")


def new_run_dir() -> Path:
    """Create a fresh, short run directory (socket paths must stay < 108 bytes).

    The base is ``$DRAKIT_E2E_DIR`` or ``/tmp/drakit-e2e``; the ten most recent
    runs are kept, older ones removed.
    """
    base = Path(os.environ.get("DRAKIT_E2E_DIR", "/tmp/drakit-e2e"))
    base.mkdir(parents=True, exist_ok=True)
    runs = sorted((p for p in base.glob("run-*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[:-9]:
        shutil.rmtree(old, ignore_errors=True)
    run_dir = base / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run_dir.mkdir()
    return run_dir


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


@dataclass
class StandInResult:
    """Outcome of one kubelet stand-in invocation.

    Attributes:
        exit_code: 0 ok, 1 error, 2 usage, 3 timeout, 4 strict wire check, 5 unimplemented.
        doc: The JSON document it printed.
        stderr: Its logs.
    """

    exit_code: int
    doc: dict[str, Any]
    stderr: str


class KubeletStandIn:
    """Runs ``kubelet-standin`` subcommands (see hack/control-plane/kubelet-standin).

    Args:
        binary: Path of the ``kubelet-standin`` binary.
        kubeconfig: Kubeconfig passed to the kubelet-side subcommands.
    """

    def __init__(self, binary: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(self, subcommand: str, *args: str, timeout: float = 120.0) -> StandInResult:
        """Run one subcommand and decode its JSON document.

        Args:
            subcommand: E.g. ``raw-getinfo`` or ``prepare``.
            *args: Its flags.
            timeout: Seconds before the process is killed.

        Returns:
            The decoded result (``doc`` is empty if stdout was not JSON).
        """
        argv = [str(self.binary), subcommand]
        if self.kubeconfig is not None and not subcommand.startswith("raw-"):
            argv.append(f"--kubeconfig={self.kubeconfig}")
        argv.extend(args)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        try:
            doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            doc = {}
        return StandInResult(exit_code=proc.returncode, doc=doc, stderr=proc.stderr)


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 60.0,
    interval: float = 0.25,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; return that value.

    Raises:
        TimeoutError: If it stays falsy for ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@contextlib.contextmanager
def fresh_namespace(
    cp: ControlPlane, prefix: str = "e2e", labels: dict[str, str] | None = None
) -> Iterator[str]:
    """A namespace ``<prefix>-<random>`` with ``labels``, deleted (pods first) on exit."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cp.create_namespace(name, {"drakit-e2e": "true", **(labels or {})})
    try:
        yield name
    finally:
        cp.delete_namespace(name)
