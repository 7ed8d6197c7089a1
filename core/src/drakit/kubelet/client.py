"""A client that calls a DRA plugin's sockets the way the kubelet does.

Used by ``drakit demo``, the benchmarks and tests to drive a running ``drakit node`` over the
real wire protocol (gRPC over Unix sockets). The conformance proof against the kubelet's own
code is the Go stand-in (``hack/control-plane/kubelet-standin``); this client is the Python
convenience.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import grpc

from drakit.kubelet._proto import dra_v1_pb2 as v1
from drakit.kubelet._proto import dra_v1_pb2_grpc as v1_grpc
from drakit.kubelet._proto import pluginregistration_pb2 as reg
from drakit.kubelet._proto import pluginregistration_pb2_grpc as reg_grpc
from drakit.models import (
    ClaimPrepareResult,
    ClaimRef,
    ClaimUnprepareResult,
    PreparedDeviceRef,
)

__all__ = ["KubeletClient", "PluginInfo"]


class PluginInfo:
    """What a plugin's registration socket reports."""

    def __init__(self, kind: str, name: str, endpoint: str, versions: Sequence[str]) -> None:
        self.kind = kind
        self.name = name
        self.endpoint = endpoint
        self.versions = list(versions)


class KubeletClient:
    """Talks to one driver: GetInfo on the registration socket, then DRA v1 on its endpoint.

    Args:
        registration_socket: the plugin's socket in ``plugins_registry``.
        timeout: per-call deadline in seconds (the kubelet uses 45 s for prepare).
    """

    def __init__(self, registration_socket: Path, *, timeout: float = 45.0) -> None:
        self.timeout = timeout
        with grpc.insecure_channel(f"unix://{registration_socket}") as ch:
            info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=1.0)
        self.info = PluginInfo(info.type, info.name, info.endpoint, info.supported_versions)
        self._channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        self._dra = v1_grpc.DRAPluginStub(self._channel)

    def __enter__(self) -> KubeletClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the DRA channel."""
        self._channel.close()

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimPrepareResult]:
        """NodePrepareResources (v1)."""
        req = v1.NodePrepareResourcesRequest(
            claims=[v1.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        resp = self._dra.NodePrepareResources(req, timeout=self.timeout)
        return {
            uid: ClaimPrepareResult(
                error=r.error,
                devices=[
                    PreparedDeviceRef(
                        requests=list(d.request_names),
                        pool=d.pool_name,
                        device=d.device_name,
                        cdi_device_ids=list(d.cdi_device_ids),
                    )
                    for d in r.devices
                ],
            )
            for uid, r in resp.claims.items()
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimUnprepareResult]:
        """NodeUnprepareResources (v1)."""
        req = v1.NodeUnprepareResourcesRequest(
            claims=[v1.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        resp = self._dra.NodeUnprepareResources(req, timeout=self.timeout)
        return {uid: ClaimUnprepareResult(error=r.error) for uid, r in resp.claims.items()}
