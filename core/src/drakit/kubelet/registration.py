"""The kubelet plugin registration service (``pluginregistration.Registration``).

The kubelet's plugin watcher finds the registration socket in ``plugins_registry/``, calls
``GetInfo`` to learn the driver name and the DRA socket, registers the plugin, and reports the
outcome with ``NotifyRegistrationStatus``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc

from drakit.kubelet._proto import pluginregistration_pb2 as pb
from drakit.kubelet._proto import pluginregistration_pb2_grpc as pb_grpc

__all__ = [
    "DRA_PLUGIN_TYPE",
    "DRA_V1BETA1_SERVICE",
    "DRA_V1_SERVICE",
    "HEALTH_V1ALPHA1_SERVICE",
    "HEALTH_V1_SERVICE",
    "RegistrationServicer",
    "RegistrationStatus",
]

logger = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
"""``PluginInfo.type`` of a DRA driver."""
DRA_V1_SERVICE = "v1.DRAPlugin"
"""``supported_versions`` entry for ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` (kubelet 1.34+)."""
DRA_V1BETA1_SERVICE = "v1beta1.DRAPlugin"
"""``supported_versions`` entry for ``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``."""
HEALTH_V1_SERVICE = "v1.DRAResourceHealth"
"""``supported_versions`` entry for the health service ``v1.DRAResourceHealth`` (kubelet 1.37+)."""
HEALTH_V1ALPHA1_SERVICE = "v1alpha1.DRAResourceHealth"
"""``supported_versions`` entry for ``v1alpha1.DRAResourceHealth`` (kubelet 1.34+)."""


@dataclass(frozen=True)
class RegistrationStatus:
    """What the kubelet last reported through ``NotifyRegistrationStatus``.

    Attributes:
        registered: Whether the kubelet registered the plugin.
        error: The kubelet's error message when it did not.
        received_at: When the report arrived (UTC).
    """

    registered: bool
    error: str
    received_at: datetime


class RegistrationServicer(pb_grpc.RegistrationServicer):
    """Answers the kubelet's registration calls and remembers the outcome.

    Thread-safe: the status is written by gRPC worker threads and read by anyone (readiness
    probes, tests).

    Args:
        driver_name: The DRA driver name (``PluginInfo.name``).
        endpoint: Absolute path of the DRA service socket (``PluginInfo.endpoint``).
        supported_versions: The gRPC services offered on the endpoint, preferred first.
    """

    def __init__(self, driver_name: str, endpoint: str, supported_versions: Sequence[str]) -> None:
        if not supported_versions:
            raise ValueError("supported_versions must name at least one DRA node service")
        self._info = pb.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=driver_name,
            endpoint=endpoint,
            supported_versions=list(supported_versions),
        )
        self._driver = driver_name
        self._lock = threading.Lock()
        self._status: RegistrationStatus | None = None
        self._registered = threading.Event()

    @property
    def status(self) -> RegistrationStatus | None:
        """The last status the kubelet reported, or None before the first report."""
        with self._lock:
            return self._status

    @property
    def registered(self) -> bool:
        """True when the kubelet's last report said the plugin is registered."""
        return self._registered.is_set()

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block until the kubelet reports a successful registration.

        Args:
            timeout: Seconds to wait at most; None waits forever.

        Returns:
            Whether the plugin is registered.
        """
        return self._registered.wait(timeout)

    def GetInfo(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.PluginInfo:
        """Return the plugin's type, name, DRA endpoint and supported services."""
        logger.debug("GetInfo from the kubelet for driver %s", self._driver)
        info = pb.PluginInfo()
        info.CopyFrom(self._info)
        return info

    def NotifyRegistrationStatus(
        self, request: pb.RegistrationStatus, context: grpc.ServicerContext
    ) -> pb.RegistrationStatusResponse:
        """Record the kubelet's registration result; a failure is logged and answered with an error.

        Like the Go helper, a failed registration is answered with a gRPC error
        ``failed registration process: <error>``; the kubelet only logs it.
        """
        status = RegistrationStatus(
            registered=request.plugin_registered,
            error=request.error,
            received_at=datetime.now(UTC),
        )
        with self._lock:
            self._status = status
            if status.registered:
                self._registered.set()
            else:
                self._registered.clear()
        if status.registered:
            logger.info("kubelet registered DRA driver %s", self._driver)
        else:
            logger.error("kubelet failed to register DRA driver %s: %s", self._driver, status.error)
            context.set_code(grpc.StatusCode.UNKNOWN)
            context.set_details(f"failed registration process: {status.error}")
        return pb.RegistrationStatusResponse()
