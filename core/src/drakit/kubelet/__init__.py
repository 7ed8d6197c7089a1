"""drakit's kubelet-facing gRPC layer: plugin registration, the DRA node service and health.

The only package in drakit that imports grpc. See ``docs/kubelet-services.md``.
"""

from __future__ import annotations

from drakit.kubelet.dra import NodeHandler, NodeService
from drakit.kubelet.health import (
    DEFAULT_HEALTH_INTERVAL,
    HealthBroadcaster,
    HealthSource,
    HealthStreamer,
)
from drakit.kubelet.registration import (
    DRA_PLUGIN_TYPE,
    DRA_V1_SERVICE,
    DRA_V1BETA1_SERVICE,
    HEALTH_V1_SERVICE,
    HEALTH_V1ALPHA1_SERVICE,
    RegistrationStatus,
)
from drakit.kubelet.server import (
    DEFAULT_KUBELET_DIR,
    MAX_SOCKET_PATH_BYTES,
    KubeletPluginServer,
    SocketPaths,
    SocketPathTooLongError,
    grpc_initialised,
    socket_paths,
)

__all__ = [
    "DEFAULT_HEALTH_INTERVAL",
    "DEFAULT_KUBELET_DIR",
    "DRA_PLUGIN_TYPE",
    "DRA_V1BETA1_SERVICE",
    "DRA_V1_SERVICE",
    "HEALTH_V1ALPHA1_SERVICE",
    "HEALTH_V1_SERVICE",
    "MAX_SOCKET_PATH_BYTES",
    "HealthBroadcaster",
    "HealthSource",
    "HealthStreamer",
    "KubeletPluginServer",
    "NodeHandler",
    "NodeService",
    "RegistrationStatus",
    "SocketPathTooLongError",
    "SocketPaths",
    "grpc_initialised",
    "socket_paths",
]
