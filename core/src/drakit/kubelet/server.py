"""The kubelet-facing side of one DRA driver: its registration socket and its DRA service socket.

:class:`KubeletPluginServer` owns two gRPC servers on two Unix sockets:

* the registration socket in ``<kubelet_dir>/plugins_registry/`` (``pluginregistration``),
* the DRA socket in ``<kubelet_dir>/plugins/<driver>/`` (DRAPlugin v1 and v1beta1, and the
  DRAResourceHealth services v1 and v1alpha1 when a health source is given).

Socket names follow the Go helper (``k8s.io/dynamic-resource-allocation/kubeletplugin``) so that
two instances of a driver can run side by side during a rolling update; see
:func:`socket_paths` and ``docs/kubelet-services.md``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc

from drakit.errors import DrakitError
from drakit.kubelet._proto import (
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2_grpc,
    pluginregistration_pb2_grpc,
)
from drakit.kubelet.dra import (
    DRAPluginV1beta1Servicer,
    DRAPluginV1Servicer,
    NodeHandler,
    NodeService,
)
from drakit.kubelet.health import (
    DEFAULT_HEALTH_INTERVAL,
    DRAResourceHealthV1alpha1Servicer,
    DRAResourceHealthV1Servicer,
    HealthSource,
    HealthStreamer,
)
from drakit.kubelet.registration import (
    DRA_V1_SERVICE,
    DRA_V1BETA1_SERVICE,
    HEALTH_V1_SERVICE,
    HEALTH_V1ALPHA1_SERVICE,
    RegistrationServicer,
    RegistrationStatus,
)

__all__ = [
    "DEFAULT_KUBELET_DIR",
    "MAX_SOCKET_PATH_BYTES",
    "KubeletPluginServer",
    "SocketPathTooLongError",
    "SocketPaths",
    "grpc_initialised",
    "socket_paths",
]

logger = logging.getLogger(__name__)

DEFAULT_KUBELET_DIR = "/var/lib/kubelet"
"""The kubelet's default ``--root-dir``."""


@contextmanager
def grpc_initialised() -> Iterator[None]:
    """Hold grpc's core initialised for the block, so that it initialises now.

    grpc has no public call for that: its core initialises when the process makes its first
    server or channel, so an unstarted server (no port, no threads of its own) is made and
    kept for the block. :meth:`drakit.node.daemon.Node.start` holds it from the beginning of its
    start-up: grpc's core allocates about 2 MiB while it initialises and frees them at once,
    and start-up still has to allocate more than that, in the memory they leave free. When
    the first kubelet server initialised it, after discovery, those 2 MiB were the node
    process's peak (``benchmarks/README.md``).
    """
    server = grpc.server(ThreadPoolExecutor(max_workers=1, thread_name_prefix="drakit-grpc-init"))
    try:
        yield
    finally:
        del server


MAX_SOCKET_PATH_BYTES = 107
"""Longest Unix socket path gRPC accepts: ``sun_path`` is 108 bytes including the final NUL."""

_DRIVER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INSTANCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SocketPathTooLongError(DrakitError, ValueError):
    """A socket path does not fit the 108-byte ``sun_path`` of a Unix socket address.

    Attributes:
        path: The (shortest candidate) path that was too long.
    """

    def __init__(self, path: Path, what: str) -> None:
        size = len(os.fsencode(path))
        super().__init__(
            f"{what} path {str(path)!r} is {size} bytes; Unix socket paths may have at most "
            f"{MAX_SOCKET_PATH_BYTES} bytes (108 including the terminating NUL). Fix: use a "
            "shorter kubelet directory (the kubelet's --root-dir, mounted at the same path in "
            "the driver container) or a shorter driver name; the instance id is already hashed "
            "to 11 characters in the fallback names"
        )
        self.path = path


@dataclass(frozen=True)
class SocketPaths:
    """Where one driver instance listens.

    Attributes:
        registration: The registration socket, in the kubelet's ``plugins_registry`` directory.
        dra: The DRA service socket (the ``endpoint`` reported in GetInfo).
    """

    registration: Path
    dra: Path


def _b64_sha256(data: str, size: int) -> str:
    digest = hashlib.sha256(data.encode()).digest()[:size]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def socket_paths(
    driver_name: str, kubelet_dir: str | os.PathLike[str], instance_id: str | None = None
) -> SocketPaths:
    """Compute the socket paths of one driver instance, like the Go kubelet-plugin helper.

    Without ``instance_id``: ``plugins_registry/<driver>-reg.sock`` and
    ``plugins/<driver>/dra.sock`` (one instance per node at a time).

    With ``instance_id`` (the pod UID; required for rolling updates with maxSurge > 0): the
    registration socket is the first of ``<driver>-<id>-reg.sock``,
    ``<driver>-<b64url(sha256(id)[:8])>-reg.sock`` and
    ``dra-<b64url(sha256(driver + NUL + id)[:16])>-reg.sock`` whose full path fits; the DRA socket
    is ``dra-<id>.sock``, or ``dra-<b64url(sha256(id)[:8])>.sock`` if that does not fit.

    Args:
        driver_name: The DRA driver name (a lower-case DNS subdomain).
        kubelet_dir: The kubelet's root directory.
        instance_id: A per-instance id that survives container restarts (the pod UID).

    Returns:
        The two socket paths (absolute).

    Raises:
        ValueError: The driver name or instance id is not usable in a file name.
        SocketPathTooLongError: No candidate name fits the Unix socket path limit.
    """
    if not _DRIVER_NAME.match(driver_name) or len(driver_name) > 253:  # noqa: PLR2004
        raise ValueError(f"driver name {driver_name!r} is not a lower-case DNS subdomain")
    if instance_id is not None and not _INSTANCE_ID.match(instance_id):
        raise ValueError(
            f"instance id {instance_id!r} may only contain letters, digits, '.', '_' and '-'"
        )
    root = Path(kubelet_dir).absolute()
    registry = root / "plugins_registry"
    plugin_dir = root / "plugins" / driver_name
    if instance_id is None:
        reg_candidates = [f"{driver_name}-reg.sock"]
        dra_candidates = ["dra.sock"]
    else:
        short = _b64_sha256(instance_id, 8)
        reg_candidates = [
            f"{driver_name}-{instance_id}-reg.sock",
            f"{driver_name}-{short}-reg.sock",
            f"dra-{_b64_sha256(driver_name + chr(0) + instance_id, 16)}-reg.sock",
        ]
        dra_candidates = [f"dra-{instance_id}.sock", f"dra-{short}.sock"]
    reg = next((registry / n for n in reg_candidates if _fits(registry / n)), None)
    if reg is None:
        raise SocketPathTooLongError(registry / reg_candidates[-1], "registration socket")
    dra = next((plugin_dir / n for n in dra_candidates if _fits(plugin_dir / n)), None)
    if dra is None:
        raise SocketPathTooLongError(plugin_dir / dra_candidates[-1], "DRA socket")
    return SocketPaths(registration=reg, dra=dra)


SOCKET_MODE = 0o600
"""Mode of both sockets, whatever the umask: only root (the kubelet) connects."""
SOCKET_DIR_MODE = 0o700
"""Mode of ``plugins/<driver>/`` when this server creates it."""


def _private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) 0700 whatever the umask; refuse a link there."""
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=SOCKET_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, SOCKET_DIR_MODE, follow_symlinks=False)  # mkdir's mode is umask-masked
    if path.is_symlink() or not path.is_dir():
        raise NotADirectoryError(
            f"{path} is not a directory (or is a symbolic link); the DRA socket is not placed "
            "there: replace it by a directory"
        )


def _remove_path(path: Path) -> None:
    """Remove a stale socket (or file) at one of our own (temporary) socket paths."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{path} is a directory, not a socket; remove it by hand")
    logger.info("removing stale %s", path)
    path.unlink(missing_ok=True)


@dataclass
class _Listener:
    """One running gRPC server and the socket file it owns."""

    server: grpc.Server
    executor: ThreadPoolExecutor
    path: Path
    identity: tuple[int, int]  # (st_dev, st_ino) of the socket we created


class KubeletPluginServer:
    """The kubelet-facing gRPC endpoints of one DRA driver (registration + DRA service sockets).

    Several drivers in one process use one instance each (their sockets differ by driver name);
    two instances of the same driver on one node (a rolling update) need different
    ``instance_id`` values, normally each pod's UID.

    Each socket is bound under a hidden temporary name (the kubelet ignores names starting with
    ``.``) and renamed into place once its gRPC server is serving, so the kubelet never sees a
    socket that does not answer. On :meth:`stop` an instance removes a socket only if it is still
    the one it created.

    Args:
        driver_name: The DRA driver name.
        handler: Prepares and unprepares claims.
        kubelet_dir: The kubelet's root directory (``plugins_registry/`` must exist in it).
        instance_id: Per-instance id for rolling-update-safe socket names (the pod UID); None
            uses the fixed names ``<driver>-reg.sock`` / ``dra.sock``.
        health_source: Device health to stream; None leaves the health services out.
        health_interval: Seconds between full health resends (must stay below the kubelet's
            health timeout, 30 s by default).
        health_timeout_seconds: ``health_check_timeout_seconds`` reported per device; 0 keeps
            the kubelet's default.
        serialize: Run at most one prepare/unprepare at a time (see :class:`NodeService`).
        max_workers: gRPC worker threads for the DRA socket (health streams hold one each). The
            default, 4, leaves 2 for calls beside 2 health streams: the GIL runs one thread at
            a time, so more workers only overlap claim GETs, and with 16 claims in flight 8
            workers cost 10-16 % more CPU per claim than 4 (benchmarks/README.md).
        serve_v1beta1: Also serve and advertise DRAPlugin v1beta1 (for kubelets before 1.34).
    """

    def __init__(
        self,
        driver_name: str,
        handler: NodeHandler,
        *,
        kubelet_dir: str | os.PathLike[str] = DEFAULT_KUBELET_DIR,
        instance_id: str | None = None,
        health_source: HealthSource | None = None,
        health_interval: float = DEFAULT_HEALTH_INTERVAL,
        health_timeout_seconds: int = 0,
        serialize: bool = True,
        max_workers: int = 4,
        serve_v1beta1: bool = True,
    ) -> None:
        self._driver = driver_name
        self._paths = socket_paths(driver_name, kubelet_dir, instance_id)
        self._node = NodeService(driver_name, handler, serialize=serialize)
        self._serve_v1beta1 = serve_v1beta1
        self._max_workers = max_workers
        self._health_timeout = health_timeout_seconds
        self._streamer = (
            HealthStreamer(
                health_source, interval=health_interval, max_streams=max(1, max_workers // 2)
            )
            if health_source is not None
            else None
        )
        versions = [DRA_V1_SERVICE]
        if serve_v1beta1:
            versions.append(DRA_V1BETA1_SERVICE)
        if self._streamer is not None:
            versions += [HEALTH_V1_SERVICE, HEALTH_V1ALPHA1_SERVICE]
        self._versions = tuple(versions)
        self._registration = RegistrationServicer(driver_name, str(self._paths.dra), versions)
        self._lock = threading.Lock()
        self._listeners: list[_Listener] = []
        self._state = "new"

    @property
    def driver_name(self) -> str:
        """The DRA driver name."""
        return self._driver

    @property
    def registration_socket(self) -> Path:
        """Path of the registration socket."""
        return self._paths.registration

    @property
    def dra_socket(self) -> Path:
        """Path of the DRA service socket (the endpoint reported to the kubelet)."""
        return self._paths.dra

    @property
    def supported_versions(self) -> tuple[str, ...]:
        """The services advertised in GetInfo, preferred first."""
        return self._versions

    @property
    def registration_status(self) -> RegistrationStatus | None:
        """The kubelet's last NotifyRegistrationStatus report, or None before the first one."""
        return self._registration.status

    @property
    def registered(self) -> bool:
        """True when the kubelet's last report said the driver is registered."""
        return self._registration.registered

    @property
    def running(self) -> bool:
        """True between a successful :meth:`start` and :meth:`stop`."""
        return self._state == "running"

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block until the kubelet reports a successful registration; returns whether it did."""
        return self._registration.wait_registered(timeout)

    def start(self) -> None:
        """Serve the DRA socket, then the registration socket.

        Raises:
            RuntimeError: Already started, or a gRPC server could not bind.
            FileNotFoundError: The kubelet's ``plugins_registry`` directory is missing.
        """
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"KubeletPluginServer for {self._driver} is {self._state}")
            registry = self._paths.registration.parent
            if not registry.is_dir():
                raise FileNotFoundError(
                    f"kubelet plugin registry directory {registry} does not exist: is the "
                    "kubelet directory right and mounted into the driver container?"
                )
            _private_dir(self._paths.dra.parent)
            try:
                self._listeners.append(self._listen(self._paths.dra, self._add_dra_services, "dra"))
                self._listeners.append(
                    self._listen(self._paths.registration, self._add_registration, "reg")
                )
            except BaseException:
                self._shutdown(grace=0)
                self._state = "stopped"
                raise
            self._state = "running"
        logger.info(
            "DRA driver %s serving %s (registration %s, services %s)",
            self._driver,
            self._paths.dra,
            self._paths.registration,
            ", ".join(self._versions),
        )

    def stop(self, grace: float = 5.0) -> None:
        """Stop both servers and remove this instance's sockets; idempotent.

        New calls are refused first, then the registration socket goes (the kubelet then stops
        using this instance), health streams are ended, and calls in flight get ``grace``
        seconds to finish before they are cancelled.

        Args:
            grace: Seconds in-flight calls may still take before they are cancelled.
        """
        with self._lock:
            if self._state != "running":
                self._state = "stopped"
                return
            self._state = "stopping"
            self._shutdown(grace)
            self._state = "stopped"
        logger.info("DRA driver %s stopped serving %s", self._driver, self._paths.dra)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- internals ------------------------------------------------------------------------------

    def _add_dra_services(self, server: grpc.Server) -> None:
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DRAPluginV1Servicer(self._node), server)
        if self._serve_v1beta1:
            dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
                DRAPluginV1beta1Servicer(self._node), server
            )
        if self._streamer is not None:
            health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
                DRAResourceHealthV1Servicer(self._streamer, timeout_seconds=self._health_timeout),
                server,
            )
            health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
                DRAResourceHealthV1alpha1Servicer(
                    self._streamer, timeout_seconds=self._health_timeout
                ),
                server,
            )

    def _add_registration(self, server: grpc.Server) -> None:
        pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(self._registration, server)

    def _listen(
        self, path: Path, add_services: Callable[[grpc.Server], None], kind: str
    ) -> _Listener:
        """Start a gRPC server on ``path``: bind a hidden name, serve, then rename into place."""
        # Hidden (the kubelet ignores dot files) and no longer than the final name, so it fits.
        tmp = path.with_name("." + _b64_sha256(str(path), 8)[: len(path.name) - 1])
        _remove_path(tmp)
        if path.exists() or path.is_symlink():
            logger.info("replacing stale %s", path)
        workers = self._max_workers if kind == "dra" else 2
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"drakit-{kind}")
        server = grpc.server(executor)
        add_services(server)
        try:
            try:
                server.add_insecure_port(f"unix:{tmp}")
            except RuntimeError as exc:
                raise RuntimeError(f"cannot listen on {tmp} (for {path}): {exc}") from exc
            os.chmod(tmp, SOCKET_MODE, follow_symlinks=False)  # bound with the umask's mode
            server.start()
            tmp.replace(path)  # atomic: a stale socket of ours is replaced, never seen missing
            st = path.lstat()
        except BaseException:
            server.stop(0).wait()
            executor.shutdown(wait=False)
            _remove_path(tmp)
            raise
        logger.debug("listening on %s", path)
        return _Listener(
            server=server, executor=executor, path=path, identity=(st.st_dev, st.st_ino)
        )

    def _shutdown(self, grace: float) -> None:
        """Refuse new calls, unpublish registration, end health streams, drain, remove sockets.

        Every server refuses new calls before the registration socket goes, so that once the
        kubelet can no longer find this instance, no new call reaches it either.
        """
        listeners = list(reversed(self._listeners))  # registration first, then DRA
        self._listeners.clear()
        done = [lst.server.stop(grace) for lst in listeners]  # returns at once; refuses new calls
        for lst in listeners:
            if lst.path == self._paths.registration:
                self._remove_own(lst)
        if self._streamer is not None:
            self._streamer.close()
        for event in done:
            event.wait()
        for lst in listeners:
            lst.executor.shutdown(wait=False)
            self._remove_own(lst)

    @staticmethod
    def _remove_own(lst: _Listener) -> None:
        """Remove the socket file only if it is still the one this instance created."""
        try:
            st = lst.path.lstat()
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) != lst.identity:
            logger.info("not removing %s: another instance owns it now", lst.path)
            return
        lst.path.unlink(missing_ok=True)
