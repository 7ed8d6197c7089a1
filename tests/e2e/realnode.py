"""A real Kubernetes node for end-to-end tests: containerd, runc, CNI and the kubelet.

:class:`RealNode` runs containerd (CDI and NRI on) and the real kubelet, both built from the Go
module proxy (``hack/node/build.sh``, ``hack/control-plane/build.sh``), against the tests'
:class:`~tests.e2e.controlplane.ControlPlane`. The node registers itself, becomes Ready, and runs
pods from images imported without a registry (``hack/node/images.py``).

What it does so that nothing on the machine changes (``../shared/reference/real-node.md`` §3):

- **Mounts**: containerd and the kubelet run in one private mount namespace held by a small
  holder process. Inside it, tmpfs covers the paths they write regardless of their flags
  (``/var/lib``: the kubelet's ``device-plugins``, CNI's cache; ``/var/log``: the kubelet's
  ``containers`` links), and read-only files carrying the values the kubelet checks are bound over
  the kernel tunables it would otherwise write (``protectKernelDefaults: true``: it reads, never
  writes). Every mount, overlay and pod network namespace mount dies with the namespace.
- **Cgroups**: one cgroup per v1 hierarchy beneath the cgroup the test process runs in (read from
  ``/proc/self/cgroup``), with ``runtime/`` (containerd, the kubelet, the shims) and ``pods/`` (the
  kubelet's ``cgroupRoot``) below it. Teardown kills what is left in it and removes every cgroup
  it or runc created, in the unified hierarchy too. No hierarchy is mounted or remounted.
- **Network**: the pods' CNI bridge has a name and a /24 of this node's own, no gateway and no
  masquerade, so the bridge plugin never enables forwarding and no iptables rule is written
  (``iptables`` is kept off the kubelet's PATH); the bridge is deleted at teardown. The kubelet's
  node IP is the machine's own source address (loopback is refused); its ports listen on loopback.
- **Files**: everything lives under the node's run directory (``/tmp/rn-*``: short, for socket
  paths) and is deleted at teardown unless ``DRAKIT_E2E_KEEP`` is set.

The kubelet uses the admin kubeconfig and authenticates callers of its own port through the API
server (webhook authentication and authorization), so :meth:`RealNode.kubelet_metrics` reads its
``/metrics`` with the admin token.

The module is independent of pytest so a node can be run by hand (``docs/testing.md``).
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
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.e2e.controlplane import REPO_ROOT, ControlPlane, ControlPlaneError, free_port, wait_for
from tests.e2e.nodeproc import RESOURCE

logger = logging.getLogger(__name__)

NODE_BUILD = REPO_ROOT / "hack" / "node" / "build.sh"
IMAGES_SCRIPT = REPO_ROOT / "hack" / "node" / "images.py"
#: The image every test pod runs (busybox from Debian's busybox-static), also the sandbox image.
TEST_IMAGE = "docker.io/drakit/test:1"
#: drakit's own image (deployments/Dockerfile's recipe), as hack/node/images.py names it.
DRAKIT_IMAGE_REPOSITORY = "docker.io/drakit/drakit"
#: What the node needs from hack/node/build.sh (the kubelet comes from the control plane's dir).
NODE_BINARIES = ("containerd", "ctr", "containerd-shim-runc-v2", "runc", "bridge", "host-local")
#: The v1 hierarchies of these machines (real-node.md); ``name=systemd`` is mounted as systemd.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Kernel tunables the kubelet checks (protectKernelDefaults) and the values it wants.
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
_PR_SET_PDEATHSIG = 1


class RealNodeError(RuntimeError):
    """The real node could not be built, started or cleaned up."""


def resolve_node_bin_dir(*, build: bool = True) -> Path:
    """The directory with containerd, runc and the CNI plugins (built when ``build``)."""
    args = ["bash", str(NODE_BUILD)] + ([] if build else ["--print-bin-dir"])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=3600, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RealNodeError(f"{NODE_BUILD} failed: {last}")
    bin_dir = Path(proc.stdout.strip().splitlines()[-1])
    missing = [b for b in NODE_BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise RealNodeError(f"{bin_dir} lacks {', '.join(missing)}; run {NODE_BUILD}")
    return bin_dir


def build_images() -> Path:
    """The directory with the OCI image tarballs (``test.tar``, ``drakit.tar``), built if needed.

    ``DRAKIT_NODE_IMAGES_DIR`` names a directory of prebuilt tarballs instead.
    """
    prebuilt = os.environ.get("DRAKIT_NODE_IMAGES_DIR")
    if prebuilt:
        return Path(prebuilt)
    out = Path(os.environ.get("DRAKIT_E2E_DIR", "/tmp/drakit-e2e")) / "images"
    proc = subprocess.run(
        ["python3", str(IMAGES_SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RealNodeError(f"{IMAGES_SCRIPT} failed: {last}")
    return Path(proc.stdout.strip().splitlines()[-1])


def node_ip() -> str:
    """The machine's own source address (the kubelet refuses loopback as its node IP)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "route", "get", "192.0.2.255"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if "src" in out:
        return out[out.index("src") + 1]
    raise RealNodeError("no IPv4 source address on this machine (the kubelet needs a node IP)")


def _own_cgroups() -> dict[str, str]:
    """Hierarchy directory name -> the path of this process's cgroup in it (cgroup v1)."""
    found: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:
            continue  # the unified hierarchy
        for name in controllers.split(","):
            found[name.removeprefix("name=")] = path
    return {
        name: path for name, path in found.items() if (CGROUP_ROOT / name / "cgroup.procs").exists()
    }


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class _Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]


@dataclass
class RealNode:
    """containerd + kubelet registered with ``cp`` as Node ``name``.

    Args:
        cp: The control plane.
        node_bin: The directory of :func:`resolve_node_bin_dir`.
        images: Image tarballs to import into containerd's ``k8s.io`` namespace.
        name: The Node's name (default ``realnode-<random>``).
        max_pods: The kubelet's ``maxPods``.
    """

    cp: ControlPlane
    node_bin: Path
    images: Sequence[Path] = ()
    name: str = field(default_factory=lambda: f"realnode-{secrets.token_hex(3)}")
    max_pods: int = 32
    root: Path = field(init=False)
    ip: str = field(init=False, default="")
    kubelet_port: int = field(init=False, default=0)
    healthz_port: int = field(init=False, default=0)
    _subnet: str = field(init=False, default="")
    _procs: dict[str, _Proc] = field(init=False, default_factory=dict)
    _holder: subprocess.Popen[bytes] | None = field(init=False, default=None)
    _cgroups: list[Path] = field(init=False, default_factory=list)
    _cgroup_base: str = field(init=False, default="")
    _unified_before: set[Path] = field(init=False, default_factory=set)
    bridge: str = field(init=False, default="")
    timings: dict[str, float] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        # Short (socket paths stay below 108 bytes), and not below /dev: containers get a /dev
        # of their own, so the chart's hostPath mounts of these directories must live elsewhere.
        self.root = Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))
        self.root.chmod(0o755)
        token = secrets.token_hex(3)
        self.bridge = f"drk{token}"
        self._subnet = f"10.{100 + secrets.randbelow(100)}.{secrets.randbelow(250)}.0/24"

    # ------------------------------------------------------------------ paths

    @property
    def kubelet_dir(self) -> Path:
        """The kubelet's ``--root-dir`` (drakit's ``--kubelet-dir``)."""
        return self.root / "k"

    @property
    def cdi_dir(self) -> Path:
        """The CDI directory containerd reads (drakit's ``--cdi-dir``)."""
        return self.root / "cdi"

    @property
    def nri_socket(self) -> Path:
        """containerd's NRI socket."""
        return self.root / "nri.sock"

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket (CRI)."""
        return self.root / "c.sock"

    @property
    def logs_dir(self) -> Path:
        """containerd's and the kubelet's logs: in the control plane's run directory, kept."""
        return self.cp.run_dir / "logs" / self.name

    @property
    def pod_logs_dir(self) -> Path:
        """The kubelet's ``podLogsDir`` (``<ns>_<pod>_<uid>/<container>/<n>.log``), kept."""
        return self.logs_dir / "pods"

    @property
    def cgroup_path(self) -> str:
        """The node's cgroup (the same path in every v1 hierarchy)."""
        return self._cgroup_base

    # -------------------------------------------------------------- lifecycle

    def start(self, *, ready_timeout: float = 90.0) -> RealNode:
        """Start containerd and the kubelet and wait for the Node to be Ready."""
        began = time.monotonic()
        try:
            self.ip = node_ip()
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            self.pod_logs_dir.mkdir(exist_ok=True)
            for sub in ("cdi", "k", "cni/net.d", "ctd/root", "ctd/state"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            self._make_cgroups()
            self._start_holder()
            self._write_cni_config()
            self.start_containerd()
            self.timings["containerd"] = time.monotonic() - began
            for image in self.images:
                self.ctr("images", "import", "--platform", "linux/amd64", str(image))
            self.start_kubelet()
            self.wait_ready(ready_timeout)
            self.timings["ready"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _make_cgroups(self) -> None:
        own = _own_cgroups()
        if not own:
            raise RealNodeError("no cgroup v1 hierarchy found under /sys/fs/cgroup")
        # One path for every hierarchy: below the deepest cgroup this process is in (the memory
        # controller puts it below the root on these machines), so the machine's limits apply.
        deepest = max(own.values(), key=lambda p: p.count("/"))
        self._cgroup_base = f"{deepest.rstrip('/')}/drakit-{self.root.name}"
        parts = self._cgroup_base.strip("/").split("/")
        self._unified_before = {
            level
            for depth in range(1, len(parts))
            if (level := CGROUP_ROOT / "unified" / "/".join(parts[:depth])).exists()
        }
        for hierarchy in sorted(own):
            for leaf in ("runtime", "pods"):
                path = CGROUP_ROOT / hierarchy
                for part in [*self._cgroup_base.strip("/").split("/"), leaf]:
                    parent, path = path, path / part
                    if not path.exists():
                        path.mkdir()
                        self._cgroups.append(path)
                    if hierarchy == "cpuset":
                        for knob in ("cpuset.cpus", "cpuset.mems"):
                            if not (path / knob).read_text().strip():
                                (path / knob).write_text((parent / knob).read_text())

    def _runtime_cgroup_files(self) -> list[Path]:
        return [
            CGROUP_ROOT / h / self._cgroup_base.strip("/") / "runtime" / "cgroup.procs"
            for h in _own_cgroups()
        ]

    def _in_runtime_cgroup(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the node's runtime cgroups."""
        moves = "; ".join(f"echo $$ > {f}" for f in self._runtime_cgroup_files())
        return ["sh", "-c", f'{moves}; exec "$@"', "sh", *argv]

    def _start_holder(self) -> None:
        """The process that holds the private mount namespace (and sets up its mounts)."""
        sysctl_dir = self.root / "sysctl"
        sysctl_dir.mkdir()
        binds = []
        for key, value in KERNEL_DEFAULTS.items():
            target = Path("/proc/sys") / key
            if not target.exists():
                continue
            src = sysctl_dir / key.replace("/", ".")
            src.write_text(value + "\n")
            binds.append(f"mount --bind {src} {target} && mount -o remount,bind,ro {target}")
        script = " && ".join(
            [
                # Private copies of the host's mounts (nothing propagates back), then shared
                # among themselves as on a systemd host: the kubelet and containerd check that
                # a HostToContainer source is a shared or slave mount.
                "mount --make-rprivate /",
                "mount --make-rshared /",
                "mount -t tmpfs -o mode=755 drakit-node /var/lib",
                "mount -t tmpfs -o mode=755 drakit-node /var/log",
                *binds,
                "echo ready",
                "exec sleep 2147483647",
            ]
        )
        # stderr apart from the "ready" line: a forked child of a process that loaded gRPC may
        # log there (its fork handlers) before the shell runs
        holder_log = self.logs_dir / "mount-namespace.log"
        with holder_log.open("ab") as err:
            self._holder = subprocess.Popen(
                self._in_runtime_cgroup(
                    ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
                ),
                stdout=subprocess.PIPE,
                stderr=err,
                preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - only prctl, no locks taken
            )
        assert self._holder.stdout is not None
        line = self._holder.stdout.readline().decode().strip()
        if line != "ready":
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._holder.wait(timeout=10)
            raise RealNodeError(
                f"mount namespace set-up failed ({holder_log}): {_tail(holder_log)}"
            )

    def _nsenter(self) -> list[str]:
        assert self._holder is not None
        return ["nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", "--"]

    def nsenter_argv(self) -> list[str]:
        """A command prefix that runs a command in the node's mount namespace (``exec``, no fork).

        Where containerd's pod network namespaces are mounted: a process that must open the
        paths NRI reports for them (``drakit node`` moving netdevs) runs there.
        """
        return self._nsenter()

    def _env(self) -> dict[str, str]:
        # No /usr/sbin or /sbin: iptables must not be found (the kubelet would write host chains).
        return {
            "PATH": f"{self.node_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "TMPDIR": str(self.root / "tmp"),
        }

    def _spawn(self, name: str, argv: Sequence[str]) -> _Proc:
        (self.root / "tmp").mkdir(exist_ok=True)
        log = (self.logs_dir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            self._in_runtime_cgroup([*self._nsenter(), *argv]),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - only prctl, no locks taken
        )
        proc = _Proc(name, process, log)
        self._procs[name] = proc
        return proc

    def _write_cni_config(self) -> None:
        conf = {
            "cniVersion": "1.0.0",
            "name": "drakit-e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self._subnet}]],
                        "dataDir": str(self.root / "cni" / "ipam"),
                    },
                }
            ],
        }
        (self.root / "cni" / "net.d" / "10-drakit-e2e.conflist").write_text(json.dumps(conf))

    def _containerd_config(self) -> str:
        ctd = self.root / "ctd"
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        runc = f"{runtime}.containerd.runtimes.runc"
        return "\n".join(
            [
                "version = 3",
                f"root = '{ctd / 'root'}'",
                f"state = '{ctd / 'state'}'",
                "disabled_plugins = ['io.containerd.snapshotter.v1.blockfile',"
                " 'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs',"
                " 'io.containerd.mount-handler.v1.erofs',"
                " 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']",
                "[grpc]",
                f"  address = '{self.containerd_socket}'",
                "[ttrpc]",
                f"  address = '{self.containerd_socket}.ttrpc'",
                "[plugins.'io.containerd.internal.v1.opt']",
                f"  path = '{ctd / 'opt'}'",
                "[plugins.'io.containerd.shim.v1.manager']",
                f"  socket_dir = '{ctd / 's'}'",
                "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
                f"  sandbox = '{TEST_IMAGE}'",
                f"[{runtime}]",
                "  enable_cdi = true",
                f"  cdi_spec_dirs = ['{self.cdi_dir}']",
                "  restrict_oom_score_adj = true",
                "  disable_apparmor = true",
                "  netns_mounts_under_state_dir = true",
                f"[{runtime}.cni]",
                f"  bin_dirs = ['{self.node_bin}']",
                f"  conf_dir = '{self.root / 'cni' / 'net.d'}'",
                f"[{runc}]",
                "  runtime_type = 'io.containerd.runc.v2'",
                f"[{runc}.options]",
                f"  BinaryName = '{self.node_bin / 'runc'}'",
                f"  Root = '{ctd / 'runc'}'",
                "  SystemdCgroup = false",
                "[plugins.'io.containerd.nri.v1.nri']",
                "  disable = false",
                f"  socket_path = '{self.nri_socket}'",
                f"  plugin_path = '{ctd / 'nri-plugins'}'",
                f"  plugin_config_path = '{ctd / 'nri-conf'}'",
                "[plugins.'io.containerd.image-verifier.v1.bindir']",
                f"  bin_dir = '{ctd / 'verifiers'}'",
                "",
            ]
        )

    def start_containerd(self, timeout: float = 30.0) -> None:
        """Start (or restart) containerd and wait until its socket answers."""
        config = self.root / "containerd.toml"
        config.write_text(self._containerd_config())
        self._spawn("containerd", [str(self.node_bin / "containerd"), "--config", str(config)])
        wait_for(
            lambda: self._ctr_ok("version"),
            timeout=timeout,
            what=f"containerd to serve (log: {self.logs_dir / 'containerd.log'})",
        )

    def _ctr_ok(self, *args: str) -> bool:
        self._check_alive("containerd")
        return (
            subprocess.run(
                self._ctr_argv(*args), capture_output=True, env=self._env(), check=False
            ).returncode
            == 0
        )

    def _ctr_argv(self, *args: str) -> list[str]:
        ctr = str(self.node_bin / "ctr")
        return [*self._nsenter(), ctr, "-a", str(self.containerd_socket), "-n", "k8s.io", *args]

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``ctr`` in the node's mount namespace (``k8s.io`` namespace); return stdout."""
        proc = subprocess.run(
            self._ctr_argv(*args),
            capture_output=True,
            text=True,
            env=self._env(),
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def _kubelet_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"{self._cgroup_base}/pods",
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "imageServiceEndpoint": f"unix://{self.containerd_socket}",
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "protectKernelDefaults": True,
            "maxPods": self.max_pods,
            "podLogsDir": str(self.pod_logs_dir),
            "volumePluginDir": str(self.root / "volume-plugins"),
            "resolvConf": "",
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "imageMinimumGCAge": "240h",
            "serializeImagePulls": False,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True, "cacheTTL": "10s"},
                "x509": {},
            },
            "authorization": {"mode": "Webhook"},
            "shutdownGracePeriod": "0s",
            "containerLogMaxSize": "1Mi",
        }

    def start_kubelet(self) -> None:
        """Start (or restart) the kubelet; :meth:`wait_ready` waits for the Node."""
        if not self.kubelet_port:
            self.kubelet_port, self.healthz_port = free_port(), free_port()
        config = self.root / "kubelet.json"
        config.write_text(json.dumps(self._kubelet_config(), indent=1))
        kubelet = self.cp.binary("kubelet")
        if not kubelet.exists():
            raise RealNodeError(f"{kubelet} missing; hack/control-plane/build.sh builds it")
        self._spawn(
            "kubelet",
            [
                str(kubelet),
                f"--config={config}",
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--root-dir={self.kubelet_dir}",
                f"--cert-dir={self.root / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                "--v=2",
            ],
        )

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until the Node reports Ready."""

        def ready() -> bool:
            self._check_alive("kubelet")
            try:
                node = self.cp.api("GET", f"/api/v1/nodes/{self.name}")
            except ControlPlaneError:
                return False
            conditions = node.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        wait_for(ready, timeout=timeout, what=f"Node {self.name} Ready (logs: {self.logs_dir})")

    def _check_alive(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.process.poll() is not None:
            raise RealNodeError(
                f"{name} exited with {proc.process.returncode}: "
                f"{_tail(self.logs_dir / f'{name}.log')}"
            )

    def stop_process(self, name: str, *, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Stop containerd or the kubelet (a restart test starts it again)."""
        proc = self._procs.pop(name, None)
        if proc is None:
            return
        if proc.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.process.send_signal(sig)
            try:
                proc.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.process.kill()
                proc.process.wait(timeout=timeout)
        proc.log.close()

    # ------------------------------------------------------------------ reads

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        """A container's log as the kubelet wrote it (CRI format: the message part only)."""
        lines: list[str] = []
        for directory in sorted(self.pod_logs_dir.glob(f"{namespace}_{pod}_*/{container}")):
            for log in sorted(directory.glob("*.log")):
                for raw in log.read_text(errors="replace").splitlines():
                    parts = raw.split(" ", 3)  # <time> <stream> <P|F> <message>
                    lines.append(parts[3] if len(parts) == 4 else "")
        return "\n".join(lines)

    def kubelet_metrics(self) -> str:
        """The kubelet's ``/metrics``, read with the admin token (the API server checks it)."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the kubelet's self-signed serving certificate
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.kubelet_port}/metrics",
            headers={"Authorization": f"Bearer {self.cp.token}"},
        )
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:  # noqa: S310
            text: str = resp.read().decode()
        return text

    # --------------------------------------------------------------- teardown

    def stop(self) -> None:
        """Stop everything and remove what the node created; safe to call twice."""
        with contextlib.suppress(ControlPlaneError):
            self.cp.api("DELETE", f"/api/v1/nodes/{self.name}")
        self.stop_process("kubelet")
        self._kill_cgroup("pods")
        self.stop_process("containerd")
        self._kill_cgroup("runtime")
        if self._holder is not None:
            self._holder.kill()
            self._holder.wait(timeout=30)
            if self._holder.stdout is not None:
                self._holder.stdout.close()
            self._holder = None
        self._remove_cgroups()
        if self.bridge:
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        if not os.environ.get("DRAKIT_E2E_KEEP"):
            shutil.rmtree(self.root, ignore_errors=True)

    def _subtree(self, hierarchy: str, child: str) -> Path:
        return CGROUP_ROOT / hierarchy / self._cgroup_base.strip("/") / child

    def _kill_cgroup(self, child: str) -> None:
        """SIGKILL every process left in the node's ``child`` cgroup subtree."""
        if not self._cgroup_base:
            return
        own = os.getpid()
        for _ in range(50):
            pids: set[int] = set()
            for hierarchy in ("pids", "memory", "cpu"):
                top = self._subtree(hierarchy, child)
                if not top.exists():
                    continue
                for procs in top.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError):
                        pids |= {int(p) for p in procs.read_text().split()}
            pids.discard(own)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        logger.warning("processes left in %s/%s after SIGKILL", self._cgroup_base, child)

    def _remove_cgroups(self) -> None:
        """Remove every cgroup below the node's (runc's in the unified hierarchy too)."""
        if not self._cgroup_base:
            return
        tops = [CGROUP_ROOT / h / self._cgroup_base.strip("/") for h in _own_cgroups()]
        unified = CGROUP_ROOT / "unified" / self._cgroup_base.strip("/")
        tops.append(unified)
        for top in tops:
            if not top.exists():
                continue
            for directory in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                _rmdir_cgroup(directory)
            _rmdir_cgroup(top)
        for path in reversed(self._cgroups):  # intermediate levels this node created
            _rmdir_cgroup(path)
        # runc mirrors the path into the unified hierarchy: remove the levels it created there.
        parts = self._cgroup_base.strip("/").split("/")
        for depth in range(len(parts) - 1, 0, -1):
            level = CGROUP_ROOT / "unified" / "/".join(parts[:depth])
            if level.exists() and level not in self._unified_before:
                _rmdir_cgroup(level)


def _rmdir_cgroup(path: Path) -> None:
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    logger.warning("cgroup %s could not be removed", path)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def pod(
    name: str,
    node: str,
    command: Sequence[str],
    *,
    claims: Mapping[str, Mapping[str, str]] | None = None,
    image: str = TEST_IMAGE,
    restart: str = "Never",
    grace: int = 1,
) -> dict[str, Any]:
    """A pod for the real node: one container ``c`` running ``command``.

    Args:
        name: The pod's name.
        node: The Node's name (``nodeName``: the scheduler still allocates the claims).
        command: The container's command.
        claims: The pod's resource claims, name -> source (``{"resourceClaimName": ...}`` or
            ``{"resourceClaimTemplateName": ...}``); the container uses them all.
        image: Its image (imported, never pulled).
        restart: ``restartPolicy``.
        grace: ``terminationGracePeriodSeconds``.
    """
    claims = claims or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "c",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": list(command),
                    "resources": {"claims": [{"name": n} for n in claims]},
                }
            ],
            "resourceClaims": [{"name": n, **src} for n, src in claims.items()],
        },
    }


DONE = "--- drakit e2e: command done ---"


def pod_phase(cp: ControlPlane, ns: str, name: str) -> str:
    return str(cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")["status"].get("phase"))


def pod_events(cp: ControlPlane, ns: str, name: str) -> list[str]:
    items = cp.api("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return [
        f"{e.get('reason')}: {e.get('message')}"
        for e in items
        if e.get("involvedObject", {}).get("name") == name
    ]


def run_pod(
    cp: ControlPlane,
    node: RealNode,
    ns: str,
    name: str,
    command: str,
    claims: Mapping[str, Mapping[str, str]],
    *,
    timeout: float = 90,
) -> str:
    """Start a pod using ``claims`` that runs ``command`` (sh -c) and then stays up.

    Returns what ``command`` printed, once the pod is Running and printed it all; the pod keeps
    running (and its claims prepared) until the test deletes it.
    """
    script = f"{{ {command} ; }} 2>&1; echo {DONE}; exec sleep 3600"
    body = pod(name, node.name, ["sh", "-c", script], claims=claims)
    cp.api("POST", f"/api/v1/namespaces/{ns}/pods", body)

    def printed() -> str | None:
        if pod_phase(cp, ns, name) in ("Succeeded", "Failed"):
            raise AssertionError(f"{name} ended: {node.pod_log(ns, name, 'c')}")
        log = node.pod_log(ns, name, "c")
        return log if DONE in log else None

    try:
        log: str = wait_for(printed, timeout=timeout, what=f"pod {name} to run its command")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; events: {pod_events(cp, ns, name)}") from None
    return log.split(DONE, maxsplit=1)[0]


def claim_template(cp: ControlPlane, ns: str, name: str, device_class: str, count: int = 1) -> None:
    cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "r",
                                "exactly": {"deviceClassName": device_class, "count": count},
                            }
                        ]
                    }
                }
            },
        },
    )


def pod_claim(cp: ControlPlane, ns: str, pod_name: str) -> dict[str, Any]:
    status = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{pod_name}")["status"]
    claim_name = status["resourceClaimStatuses"][0]["resourceClaimName"]
    claim: dict[str, Any] = cp.api("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{claim_name}")
    return claim


def env_of(log: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in log.splitlines() if re.match(r"^[A-Z_][A-Z0-9_]*=", line)
    )


def delete_pod(cp: ControlPlane, ns: str, name: str) -> None:
    try:
        cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
    except ControlPlaneError as exc:
        if "HTTP 404" not in str(exc):
            raise

    def gone() -> bool:
        try:
            cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except ControlPlaneError:
            return True
        return False

    wait_for(gone, timeout=60, what=f"pod {name} deleted")


@contextlib.contextmanager
def real_node(cp: ControlPlane, node_bin: Path, images: Sequence[Path]) -> Iterator[RealNode]:
    """A started :class:`RealNode`, stopped and cleaned up on exit."""
    node = RealNode(cp, node_bin, images)
    with node:
        yield node
