"""``drakit node`` as a real subprocess, for the lifecycle end-to-end tests.

:class:`NodeProcess` starts ``drakit node`` exactly as a DaemonSet would (the console script,
flags, a YAML ``--config``, ``POD_UID`` for the socket names), waits until it serves, and stops
it with SIGTERM (or finds it killed by ``DRAKIT_CRASH_AT``). :class:`NodeDirs` is its short
kubelet/CDI/state directory tree in memory (``/dev/shm``; Unix socket paths must stay below 108
bytes), with readers for the checkpoint and the CDI specs. :class:`Proxy` is a TCP forwarder
between a node and the API server that a test can close (outage), reopen and slow down.

The helpers are independent of pytest so they can be driven from a REPL when debugging.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Self

from tests.e2e.controlplane import ControlPlane, ControlPlaneError, free_port, wait_for

from drakit.host.pluginhost import PluginHost
from drakit.kubelet.client import KubeletClient
from drakit.kubelet.server import socket_paths
from drakit.models import ClaimRef
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore

__all__ = [
    "DRIVERS",
    "RESOURCE",
    "NodeDirs",
    "NodeProcess",
    "NodeProcessError",
    "Proxy",
    "Running",
    "allocated_claim",
    "bound_claim",
    "create_claim",
    "create_claim_template",
    "create_device_class",
    "create_pod",
    "device_classes",
    "drakit_device_classes",
    "kubeconfig_via",
    "kubelet_flags",
    "memory_dir",
    "pipeline_for",
    "published",
    "published_drivers",
    "running_node",
    "wait_allocated",
]

#: Backend name -> its default DRA driver name.
DRIVERS: Final = {
    "cpu": "cpu.drakit.io",
    "nvidia_gpu": "gpu.nvidia.drakit.io",
    "amd_ainic": "ainic.amd.drakit.io",
    "composite": "pairs.composite.drakit.io",
}
RESOURCE: Final = "/apis/resource.k8s.io/v1"
_MEMBERS: Final = ("nvidia_gpu", "amd_gpu", "amd_ainic")


def published_drivers(plugins: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Plugin -> the driver it publishes under: its section's ``driver``, else the composite's
    for the composite's members (``docs/composite.md``), else its default."""
    out = {p: str(sec.get("driver") or DRIVERS[p]) for p, sec in plugins.items()}
    if "composite" in plugins:
        for m in _MEMBERS:
            if m in plugins and not plugins[m].get("driver"):
                out[m] = out["composite"]
    return out


_PR_SET_PDEATHSIG = 1


class NodeProcessError(RuntimeError):
    """``drakit node`` did not start, or did not stop as expected."""


def memory_dir(prefix: str) -> Path:
    """A fresh directory in ``/dev/shm`` (else the default temp dir), with a short path."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class NodeDirs:
    """The directories one node uses; several node processes may share one tree.

    Attributes:
        root: The (short) root directory.
    """

    root: Path

    @classmethod
    def create(cls, prefix: str = "dk-") -> NodeDirs:
        """A fresh tree with ``plugins_registry/`` in place."""
        dirs = cls(memory_dir(prefix))
        dirs.registry.mkdir(parents=True)
        return dirs

    @property
    def kubelet_dir(self) -> Path:
        """``--kubelet-dir``."""
        return self.root / "k"

    @property
    def registry(self) -> Path:
        """The plugin watcher's directory."""
        return self.kubelet_dir / "plugins_registry"

    @property
    def cdi_dir(self) -> Path:
        """``--cdi-dir``."""
        return self.root / "cdi"

    @property
    def state_dir(self) -> Path:
        """``--state-dir`` (drakit's checkpoints and locks)."""
        return self.root / "state"

    def kubelet_state(self, name: str = "kubelet") -> Path:
        """A state directory for the kubelet stand-in (its ``dra_manager_state``)."""
        return self.root / name

    def checkpoint(self, driver: str) -> dict[str, Any]:
        """The claims in ``driver``'s checkpoint (empty if there is none yet)."""
        path = self.state_dir / driver / "checkpoint.json"
        if not path.exists():
            return {}
        claims: dict[str, Any] = json.loads(path.read_text())["claims"]
        return claims

    def cdi_specs(self) -> dict[str, dict[str, Any]]:
        """Every CDI spec on disk, by file name (temporary files excluded)."""
        if not self.cdi_dir.is_dir():
            return {}
        return {
            p.name: json.loads(p.read_text())
            for p in sorted(self.cdi_dir.iterdir())
            if p.suffix == ".json" and not p.name.startswith(".")
        }

    def cdi_files(self) -> list[str]:
        """Every file in the CDI directory, temporary ones included (to find leaks)."""
        return sorted(p.name for p in self.cdi_dir.iterdir()) if self.cdi_dir.is_dir() else []

    def remove(self) -> None:
        """Delete the whole tree, unless ``DRAKIT_E2E_KEEP`` is set (to read node logs after)."""
        if os.environ.get("DRAKIT_E2E_KEEP"):
            return
        shutil.rmtree(self.root, ignore_errors=True)


def _drakit_argv() -> list[str]:
    script = Path(sys.executable).with_name("drakit")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from drakit.commands.cli import main; main()"]


class NodeProcess:
    """One ``drakit node`` process.

    Args:
        kubeconfig: The kubeconfig the node uses (the admin one, or one through a :class:`Proxy`).
        node_name: ``--node-name`` (a Node that exists in the API server).
        dirs: Its directories.
        plugins: The ``plugins`` section of its configuration (backend -> settings).
        profile: ``--profile`` (the node builds the simulated tree itself).
        sysfs_root: ``--sysfs-root`` (a simulated tree built beforehand; a process killed with
            SIGKILL cannot remove the tree that ``--profile`` builds).
        instance_id: ``POD_UID``, which makes the socket names unique per instance.
        env: Extra environment, e.g. ``{"DRAKIT_CRASH_AT": "prepare-after-cdi"}``.
        settings: Further top-level configuration (merged over the defaults here).
        name: Log file stem (default: the instance id).
        wrap: A command the node runs under, e.g. :meth:`RealNode.nsenter_argv` (it must
            ``exec`` the node, so that :attr:`pid` is the node's).
    """

    def __init__(
        self,
        *,
        kubeconfig: Path,
        node_name: str,
        dirs: NodeDirs,
        plugins: Mapping[str, Mapping[str, Any]],
        profile: str | None = None,
        sysfs_root: Path | None = None,
        instance_id: str = "a",
        env: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        name: str | None = None,
        wrap: Sequence[str] = (),
    ) -> None:
        if (profile is None) == (sysfs_root is None):
            raise ValueError("give exactly one of profile and sysfs_root")
        self.kubeconfig = kubeconfig
        self.node_name = node_name
        self.dirs = dirs
        self.plugins = {k: dict(v) for k, v in plugins.items()}
        self.profile = profile
        self.sysfs_root = sysfs_root
        self.instance_id = instance_id
        self.env = dict(env or {})
        self.wrap = list(wrap)
        self.metrics_port = free_port()
        self.log_path = dirs.root / f"node-{name or instance_id}.log"
        self.config_path = dirs.root / f"config-{name or instance_id}.yaml"
        config: dict[str, Any] = {
            "plugins": self.plugins,
            "metrics": {"address": "127.0.0.1", "port": self.metrics_port},
            "log_level": "DEBUG",
            **(settings or {}),
        }
        self.config_path.write_text(json.dumps(config, indent=1))  # JSON is YAML
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.started_at = 0.0
        self.serving_after = 0.0

    # ------------------------------------------------------------------ facts

    @property
    def drivers(self) -> list[str]:
        """The DRA drivers this process serves (sorted)."""
        return sorted(set(published_drivers(self.plugins).values()))

    @property
    def pid(self) -> int:
        """The process ID."""
        if self._proc is None:
            raise NodeProcessError("not started")
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (``-9`` after SIGKILL), or None while it runs."""
        return None if self._proc is None else self._proc.poll()

    def registration_socket(self, driver: str) -> Path:
        """Where this instance's registration socket for ``driver`` is."""
        return socket_paths(driver, self.dirs.kubelet_dir, self.instance_id).registration

    def dra_socket(self, driver: str) -> Path:
        """Where this instance's DRA service socket for ``driver`` is."""
        return socket_paths(driver, self.dirs.kubelet_dir, self.instance_id).dra

    def sockets(self) -> list[Path]:
        """Every socket path of this instance."""
        return [p for d in self.drivers for p in (self.registration_socket(d), self.dra_socket(d))]

    def client(self, driver: str, *, timeout: float = 45.0) -> KubeletClient:
        """A kubelet-like gRPC client for one of its drivers."""
        return KubeletClient(self.registration_socket(driver), timeout=timeout)

    def log(self) -> str:
        """Everything it logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of its log (for assertion messages)."""
        return "\n".join(self.log().splitlines()[-lines:])

    # -------------------------------------------------------------- lifecycle

    def start(self, *, wait: bool = True, timeout: float = 90.0) -> Self:
        """Start the process; with ``wait``, return once it serves (``/healthz`` answers).

        ``/healthz`` is served after every kubelet socket, so it also means the sockets are
        the new process's (after a crash the dead one's socket files are still there).
        """
        if self._proc is not None:
            raise NodeProcessError("already started")
        argv = [
            *self.wrap,
            *_drakit_argv(),
            "node",
            f"--config={self.config_path}",
            f"--kubeconfig={self.kubeconfig}",
            f"--node-name={self.node_name}",
            f"--kubelet-dir={self.dirs.kubelet_dir}",
            f"--cdi-dir={self.dirs.cdi_dir}",
            f"--state-dir={self.dirs.state_dir}",
            f"--metrics-port={self.metrics_port}",
        ]
        argv.append(
            f"--profile={self.profile}" if self.profile else f"--sysfs-root={self.sysfs_root}"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRAKIT_")}
        env.update({"POD_UID": self.instance_id, "PYTHONUNBUFFERED": "1", **self.env})
        self._log = self.log_path.open("ab")
        self._log.write(("$ " + " ".join(argv) + "\n").encode())
        self._log.flush()
        self.started_at = time.monotonic()
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - only prctl, no locks taken
        )
        if wait:
            try:
                self.wait_serving(timeout)
            except NodeProcessError:
                self.close()  # the caller never gets a handle to close: no process, no open log
                raise
        return self

    def http(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """GET ``path`` from its metrics/probe port; ``(0, reason)`` if nothing answers."""
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code), exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def wait_serving(self, timeout: float = 90.0) -> None:
        """Block until ``/healthz`` answers 200.

        Raises:
            NodeProcessError: It exited first, or did not serve within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.returncode
            if code is not None:
                raise NodeProcessError(
                    f"drakit node exited with {code} while starting:\n{self.log_tail()}"
                )
            if self.http("/healthz", timeout=2)[0] == 200:
                self.serving_after = time.monotonic() - self.started_at
                return
            time.sleep(0.1)
        raise NodeProcessError(f"drakit node not serving after {timeout:.0f}s:\n{self.log_tail()}")

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Block until ``/readyz`` answers 200; returns the seconds since start.

        Raises:
            NodeProcessError: Not ready within ``timeout``, or it exited.
        """
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.returncode is not None:
                raise NodeProcessError(f"drakit node exited with {self.returncode}")
            status, last = self.http("/readyz", timeout=2)
            if status == 200:
                return time.monotonic() - self.started_at
            time.sleep(0.1)
        raise NodeProcessError(f"drakit node not ready after {timeout:.0f}s: {last.strip()}")

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; returns its exit status."""
        if self._proc is None:
            raise NodeProcessError("not started")
        try:
            return self._proc.wait(timeout=timeout)
        finally:
            if self._proc.poll() is not None and self._log is not None:
                self._log.close()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit status.

        Raises:
            subprocess.TimeoutExpired: It did not exit within ``timeout``.
        """
        if self._proc is None:
            raise NodeProcessError("not started")
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGTERM)
        return self.wait(timeout)

    def close(self) -> None:
        """Make sure it is gone (SIGTERM, then SIGKILL) and its log is closed."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self.terminate(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> Self:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ---------------------------------------------------------------- running nodes


@dataclass
class Running:
    """A test module's node: a Node in the API server and the ``drakit node`` process serving it.

    Attributes:
        name: The Node's name (``--node-name``).
        dirs: The process's directories.
        proc: The process.
        sysfs_root: The simulated host root it reads, where the test built one
            (``--sysfs-root``); :attr:`root` is the same, never ``None``.
        classes: The DeviceClasses made for the module: a key of the module's choosing (a
            driver, a backend, one of drakit's class names) -> the class's name.
        facts: What the module's set-up found out (a CPU topology, a GPU's UUID, what
            ``/readyz`` answered), also readable as attributes: ``node.facts["gpu0"]`` is
            ``node.gpu0``.
    """

    name: str
    dirs: NodeDirs
    proc: NodeProcess
    sysfs_root: Path | None = None
    classes: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        """The simulated host root the test built (``--sysfs-root``)."""
        if self.sysfs_root is None:
            raise AttributeError("the node builds its own tree (--profile): no root to read")
        return self.sysfs_root

    def __getattr__(self, key: str) -> Any:
        facts = self.__dict__.get("facts") or {}
        if key not in facts:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")
        return facts[key]


@contextlib.contextmanager
def running_node(
    cp: ControlPlane,
    prefix: str,
    plugins: Mapping[str, Mapping[str, Any]],
    *,
    profile: str | None = None,
    sysfs_root: Path | None = None,
    settings: Mapping[str, Any] | None = None,
    kubeconfig: Path | None = None,
    dirs: NodeDirs | None = None,
    ready_timeout: float | None = 60.0,
    classes: Mapping[str, str] | None = None,
) -> Iterator[Running]:
    """A Node named ``<prefix>-<random>`` and a ``drakit node`` serving it, removed on exit.

    The process (instance ``prefix``) is started and, with ``ready_timeout``, waited for until
    ``/readyz`` answers 200. On exit it is stopped, the Node deleted (with its ResourceSlices)
    and the directories removed.

    Args:
        cp: The control plane.
        prefix: Names the Node, the directories and the instance.
        plugins: The ``plugins`` section of the node's configuration.
        profile: ``--profile`` (give this or ``sysfs_root``).
        sysfs_root: ``--sysfs-root``: a simulated tree built beforehand.
        settings: Further top-level configuration.
        kubeconfig: The node's kubeconfig (default: the admin one).
        dirs: Its directories (default: a fresh tree, removed on exit).
        ready_timeout: Seconds to wait for ``/readyz``; ``None`` returns once it serves.
        classes: :attr:`Running.classes`.
    """
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cp.create_node(name)
    dirs = dirs or NodeDirs.create(f"dk-{prefix}-")
    try:
        proc = NodeProcess(
            kubeconfig=kubeconfig or cp.kubeconfig,
            node_name=name,
            dirs=dirs,
            plugins=plugins,
            profile=profile,
            sysfs_root=sysfs_root,
            instance_id=prefix,
            settings=settings,
        )
        with proc:
            if ready_timeout is not None:
                proc.wait_ready(timeout=ready_timeout)
            yield Running(name, dirs, proc, sysfs_root, dict(classes or {}))
    finally:
        cp.delete_node(name)
        dirs.remove()


@contextlib.contextmanager
def device_classes(
    cp: ControlPlane, prefix: str, drivers: Mapping[str, str]
) -> Iterator[dict[str, str]]:
    """A DeviceClass per ``drivers`` entry (key -> driver), each selecting all its devices.

    Yields key -> class name (``<prefix>-<key>-<random>``); the classes are deleted on exit.
    """
    suffix = uuid.uuid4().hex[:6]
    made: dict[str, str] = {}
    try:
        for key, driver in drivers.items():
            made[key] = f"{prefix}-{key.split('.')[0].replace('_', '-')}-{suffix}"
            create_device_class(cp, made[key], driver)
        yield dict(made)
    finally:
        for name in made.values():
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{name}")


# ------------------------------------------------------------------ API helpers


def create_device_class(cp: ControlPlane, name: str, driver: str) -> None:
    """A DeviceClass selecting every device of ``driver``."""
    cp.api(
        "POST",
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )


def allocated_claim(
    cp: ControlPlane,
    namespace: str,
    name: str,
    results: Sequence[Mapping[str, Any]],
    *,
    device_class: str,
    config: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Create a ResourceClaim and write ``status.allocation`` as admin (no scheduler).

    Args:
        cp: The control plane.
        namespace: Its namespace.
        name: Its name.
        results: ``status.allocation.devices.results``; their request names become the
            claim's requests (``exactly`` from ``device_class``).
        device_class: The DeviceClass of every request.
        config: ``status.allocation.devices.config``.

    Returns:
        The claim as the API server returned it after the status update.
    """
    requests = sorted({str(r["request"]).split("/", 1)[0] for r in results})
    claim = cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": r, "exactly": {"deviceClassName": device_class}} for r in requests
                    ]
                }
            },
        },
    )
    claim["status"] = {
        "allocation": {"devices": {"results": list(results), "config": list(config)}}
    }
    return cp.api("PUT", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}/status", claim)


def _create_claim_object(
    cp: ControlPlane, namespace: str, kind: str, name: str, spec: Mapping[str, Any]
) -> dict[str, Any]:
    return cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{namespace}/{kind.lower()}s",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def create_claim(
    cp: ControlPlane, namespace: str, name: str, spec: Mapping[str, Any]
) -> dict[str, Any]:
    """A ResourceClaim with this ``spec`` (``{"devices": ...}``), as the API server stored it."""
    return _create_claim_object(cp, namespace, "ResourceClaim", name, spec)


def create_claim_template(cp: ControlPlane, namespace: str, name: str, devices: Any) -> None:
    """A ResourceClaimTemplate whose claims have this ``spec.devices``."""
    _create_claim_object(
        cp, namespace, "ResourceClaimTemplate", name, {"spec": {"devices": devices}}
    )


def create_pod(
    cp: ControlPlane,
    namespace: str,
    name: str,
    node: str | None,
    *,
    claim: str | None = None,
    template: str | None = None,
    ref: str = "r",
    containers: Sequence[str] = ("c",),
    image: str = "x.invalid/x",
    affinity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod for ``node`` (by ``nodeSelector``) whose containers all use one claim.

    Args:
        cp: The control plane.
        namespace: The pod's namespace.
        name: The pod's name.
        node: The Node it must run on (``None``: where ``affinity`` lets it).
        claim: An existing ResourceClaim (give this or ``template``).
        template: A ResourceClaimTemplate the pod's claim is made from.
        ref: The pod's name for the claim (``spec.resourceClaims[0].name``).
        containers: The containers' names.
        image: Their image (never pulled: there is no container runtime).
        affinity: ``spec.affinity``, in place of the ``nodeSelector``.

    Returns:
        The pod as the API server returned it.
    """
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    placement: dict[str, Any] = (
        {"nodeSelector": {"kubernetes.io/hostname": node}}
        if node is not None
        else {"affinity": dict(affinity or {})}
    )
    return cp.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                **placement,
                "containers": [
                    {"name": c, "image": image, "resources": {"claims": [{"name": ref}]}}
                    for c in containers
                ],
                "resourceClaims": [{"name": ref, **source}],
            },
        },
    )


def wait_allocated(
    cp: ControlPlane, namespace: str, name: str, *, what: str, timeout: float = 60
) -> dict[str, Any]:
    """Wait until the scheduler allocated ResourceClaim ``name``; the claim then."""
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"

    def allocated() -> dict[str, Any] | None:
        claim: dict[str, Any] = cp.api("GET", path)
        return claim if (claim.get("status") or {}).get("allocation") else None

    done: dict[str, Any] = wait_for(allocated, timeout=timeout, what=what)
    return done


def bound_claim(cp: ControlPlane, namespace: str, pod: str, timeout: float = 60) -> dict[str, Any]:
    """Wait until the scheduler bound ``pod`` (with its claim's status); the claim it got."""

    def bound() -> dict[str, Any] | None:
        got = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
        statuses = got.get("status", {}).get("resourceClaimStatuses") or []
        return got if got["spec"].get("nodeName") and statuses else None

    bound_pod = wait_for(bound, timeout=timeout, what=f"the scheduler to bind {pod}")
    claim_name = bound_pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim: dict[str, Any] = cp.api(
        "GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim_name}"
    )
    return claim


def published(cp: ControlPlane, node: str) -> dict[str, set[str]]:
    """Driver -> device names in the node's ResourceSlices."""
    items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
    out: dict[str, set[str]] = {}
    for s in items:
        out.setdefault(s["spec"]["driver"], set()).update(
            d["name"] for d in s["spec"].get("devices", [])
        )
    return out


@contextlib.contextmanager
def drakit_device_classes(cp: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    """drakit's DeviceClasses for the default backends (``drakit deviceclasses -o json``), applied.

    Yields the class objects; those this call created (not those that existed) are deleted on
    exit.
    """
    out = subprocess.run(
        [*_drakit_argv(), "deviceclasses", "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    created = []
    try:
        for obj in items:
            try:
                cp.api("POST", f"{RESOURCE}/deviceclasses", obj)
                created.append(obj["metadata"]["name"])
            except ControlPlaneError as e:
                if "409" not in str(e):
                    raise
        yield items
    finally:
        for name in created:
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{name}")


@contextlib.contextmanager
def pipeline_for(
    host: PluginHost, driver: str, claim: Mapping[str, Any], root: Path
) -> Iterator[tuple[DriverState, ClaimRef]]:
    """drakit's prepare pipeline for ``driver`` in this process, with ``claim`` to GET.

    Yields the pipeline (state and CDI specs under ``root``) and the claim's reference; the
    pipeline is closed on exit. The claim is one the API server returned (it has a UID).
    """
    claims = ClaimStore()
    claims.add(dict(claim))
    state = DriverState(
        driver, host, claims, state_dir=root / "state", cdi_dir=root / "cdi", boot_id="e2e"
    )
    try:
        meta = claim["metadata"]
        yield state, ClaimRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
    finally:
        state.close()


def kubelet_flags(
    dirs: NodeDirs, node: str, pod: str, *, state: str = "kubelet", drivers: Sequence[str] = ()
) -> list[str]:
    """The kubelet stand-in flags for ``prepare``/``unprepare``/``pod-health`` of one pod.

    ``--driver`` is given for every driver so that ``unprepare`` waits for all of them (by
    default it waits for the first registration only).
    """
    return [
        f"--registry-dir={dirs.registry}",
        f"--state-dir={dirs.kubelet_state(state)}",
        f"--node={node}",
        f"--pod={pod}",
        "--timeout=90s",
        *(f"--driver={d}" for d in drivers),
    ]


def kubeconfig_via(cp: ControlPlane, port: int, path: Path) -> Path:
    """The admin kubeconfig pointed at ``127.0.0.1:<port>`` (same certificate, same IP)."""
    cfg = json.loads(cp.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


# ----------------------------------------------------------------------- proxy


class Proxy:
    """A TCP forwarder to the API server: closable (outage), reopenable, and slowable.

    While closed, connecting is refused and every open connection (watches too) is cut.
    ``delay`` holds each chunk from the API server back that many seconds (a slow server).

    Args:
        target: ``(host, port)`` of the API server.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.delay = 0.0
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Listen (on the same port as before after a :meth:`stop`)."""
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", self.port))
        self.port = lst.getsockname()[1]
        lst.listen(128)
        self._listener = lst
        threading.Thread(target=self._accept, args=(lst,), daemon=True).start()

    def stop(self) -> None:
        """Close the listener and cut every open connection."""
        lst, self._listener = self._listener, None
        if lst is not None:
            with contextlib.suppress(OSError):
                lst.shutdown(socket.SHUT_RDWR)
            lst.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self, lst: socket.socket) -> None:
        while True:
            try:
                client, _ = lst.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns |= {client, upstream}
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, slow: bool) -> None:
        try:
            while data := src.recv(65536):
                if slow and self.delay > 0:
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._conns -= {src, dst}
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    @contextlib.contextmanager
    def slowed(self, delay: float) -> Iterator[None]:
        """Hold every chunk from the API server back ``delay`` seconds inside the block."""
        self.delay = delay
        try:
            yield
        finally:
            self.delay = 0.0
