"""The DRA node service (``DRAPlugin`` v1 and v1beta1): prepare and unprepare claims.

Both API versions are served from one :class:`NodeService`, which turns the wire claims into
:class:`~drakit.models.ClaimRef` values, calls the driver's :class:`NodeHandler` and normalises
the result so that the kubelet always gets exactly one entry per requested claim UID.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast, runtime_checkable

import grpc

from drakit.kubelet._proto import dra_v1_pb2 as v1
from drakit.kubelet._proto import dra_v1_pb2_grpc as v1_grpc
from drakit.kubelet._proto import dra_v1beta1_pb2 as v1beta1
from drakit.kubelet._proto import dra_v1beta1_pb2_grpc as v1beta1_grpc
from drakit.models import ClaimPrepareResult, ClaimRef, ClaimUnprepareResult, PreparedDeviceRef

__all__ = ["DRAPluginV1Servicer", "DRAPluginV1beta1Servicer", "NodeHandler", "NodeService"]

logger = logging.getLogger(__name__)

R = TypeVar("R", ClaimPrepareResult, ClaimUnprepareResult)

_request_ids = itertools.count(1)


@runtime_checkable
class NodeHandler(Protocol):
    """What the DRA node service delegates to (drakit's prepare pipeline implements it).

    Both methods receive every claim of one kubelet call and return results keyed by claim UID.
    They may be called concurrently from gRPC worker threads unless the server serialises calls
    (the default). Raising fails every claim of the call with the exception's message.
    """

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimPrepareResult]:
        """Prepare the claims' devices; must be idempotent.

        Args:
            claims: The claims of one NodePrepareResources call (never empty).

        Returns:
            One result per claim UID; a non-empty ``error`` fails just that claim.
        """
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimUnprepareResult]:
        """Undo prepare; unknown or already unprepared claims succeed.

        Args:
            claims: The claims of one NodeUnprepareResources call (never empty).

        Returns:
            One result per claim UID; a non-empty ``error`` fails just that claim.
        """
        ...


class _WireClaim(Protocol):
    """The fields v1 and v1beta1 ``Claim`` messages share."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


def _claim_refs(claims: Iterable[_WireClaim]) -> list[ClaimRef]:
    """Convert wire claims to ClaimRefs, dropping repeated UIDs (first one wins)."""
    seen: set[str] = set()
    refs = []
    for c in claims:
        if c.uid in seen:
            continue
        seen.add(c.uid)
        refs.append(ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid))
    return refs


def _base_request_names(requests: Iterable[str]) -> list[str]:
    """Strip subrequest suffixes (``"req/sub"`` -> ``"req"``) and drop duplicates, keeping order."""
    names: list[str] = []
    for r in requests:
        base = r.split("/", 1)[0]
        if base not in names:
            names.append(base)
    return names


class NodeService:
    """Version-neutral core of the DRA node service.

    Args:
        driver_name: The DRA driver name, for log messages.
        handler: The driver's prepare/unprepare implementation.
        serialize: Run at most one prepare or unprepare at a time in this process (like the Go
            helper's default). Turn it off only when the handler does its own locking.
    """

    def __init__(self, driver_name: str, handler: NodeHandler, *, serialize: bool = True) -> None:
        self._driver = driver_name
        self._handler = handler
        self._lock: threading.Lock | None = threading.Lock() if serialize else None

    def _locked(self) -> AbstractContextManager[object]:
        return self._lock if self._lock is not None else nullcontext()

    def prepare(self, claims: Sequence[ClaimRef], *, api: str) -> dict[str, ClaimPrepareResult]:
        """Call the handler and return exactly one result per requested claim UID.

        Args:
            claims: The requested claims (UIDs unique).
            api: The API version that was called, for log messages.

        Returns:
            Results keyed by claim UID, in request order.
        """
        return self._call("prepare", claims, api, self._handler.prepare, ClaimPrepareResult)

    def unprepare(self, claims: Sequence[ClaimRef], *, api: str) -> dict[str, ClaimUnprepareResult]:
        """:meth:`prepare`'s contract, for unprepare: one result per requested claim UID."""
        return self._call("unprepare", claims, api, self._handler.unprepare, ClaimUnprepareResult)

    def _call(
        self,
        op: str,
        claims: Sequence[ClaimRef],
        api: str,
        handle: Callable[[Sequence[ClaimRef]], Mapping[str, R]],
        result: type[R],
    ) -> dict[str, R]:
        if not claims:
            return {}
        method = f"Node{op.capitalize()}Resources"
        rid = next(_request_ids)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "[%d] %s(%s) driver=%s claims=%s",
                rid,
                method,
                api,
                self._driver,
                [c.uid for c in claims],
            )
        try:
            with self._locked():
                raw = dict(handle(claims))
        except Exception as exc:
            logger.exception("[%d] %s handler of driver %s failed", rid, op, self._driver)
            err = f"{op} failed: {type(exc).__name__}: {exc}"
            return {c.uid: result(error=err) for c in claims}
        results: dict[str, R] = {}
        for c in claims:
            got = raw.pop(c.uid, None)
            results[c.uid] = (
                got
                if got is not None
                else result(error=f"driver {self._driver} returned no result for this claim")
            )
        self._log_results(rid, method, raw, results)
        return results

    def _log_results(
        self,
        rid: int,
        method: str,
        unknown: Mapping[str, object],
        results: Mapping[str, ClaimPrepareResult | ClaimUnprepareResult],
    ) -> None:
        if unknown:
            logger.warning(
                "[%d] %s: driver %s returned results for claims the kubelet did not ask for "
                "(dropped): %s",
                rid,
                method,
                self._driver,
                sorted(unknown),
            )
        for uid, res in results.items():
            if res.error:
                logger.warning("[%d] %s: claim %s failed: %s", rid, method, uid, res.error)
        logger.debug("[%d] %s done", rid, method)


_PrepareResponse = TypeVar("_PrepareResponse")
_UnprepareResponse = TypeVar("_UnprepareResponse")


class _DRAPluginServicer(Generic[_PrepareResponse, _UnprepareResponse]):
    """The DRA node service of one API version (v1 and v1beta1 differ only in their messages).

    Args:
        service: The shared, version-neutral implementation.
    """

    _api: ClassVar[str]
    _pb: ClassVar[Any]
    """The version's message module."""
    _shares: ClassVar[bool]
    """Whether the version's ``Device`` has ``share_id`` (v1 has; v1beta1 has not)."""

    def __init__(self, service: NodeService) -> None:
        self._service = service

    def _device(self, d: PreparedDeviceRef) -> Any:
        """The version's ``Device`` message of one prepared device."""
        out = self._pb.Device(
            request_names=_base_request_names(d.requests),
            pool_name=d.pool,
            device_name=d.device,
            cdi_device_ids=list(d.cdi_device_ids),
        )
        if d.share_id and self._shares:  # only allocations with allowMultipleAllocations
            out.share_id = d.share_id
        return out

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> _PrepareResponse:
        """Prepare the requested claims."""
        results = self._service.prepare(_claim_refs(request.claims), api=self._api)
        response = self._pb.NodePrepareResourcesResponse()
        device = self._device
        for uid, res in results.items():
            entry = response.claims[uid]
            entry.error = res.error
            if not res.error:
                entry.devices.extend(device(d) for d in res.devices)
        return cast("_PrepareResponse", response)

    def NodeUnprepareResources(
        self, request: Any, context: grpc.ServicerContext
    ) -> _UnprepareResponse:
        """Unprepare the requested claims."""
        results = self._service.unprepare(_claim_refs(request.claims), api=self._api)
        response = self._pb.NodeUnprepareResourcesResponse()
        for uid, res in results.items():
            response.claims[uid].error = res.error
        return cast("_UnprepareResponse", response)


class DRAPluginV1Servicer(
    _DRAPluginServicer[v1.NodePrepareResourcesResponse, v1.NodeUnprepareResourcesResponse],
    v1_grpc.DRAPluginServicer,
):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` on top of a :class:`NodeService`."""

    _api: ClassVar[str] = "v1"
    _pb: ClassVar[Any] = v1
    _shares: ClassVar[bool] = True


class DRAPluginV1beta1Servicer(
    _DRAPluginServicer[
        v1beta1.NodePrepareResourcesResponse, v1beta1.NodeUnprepareResourcesResponse
    ],
    v1beta1_grpc.DRAPluginServicer,
):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`` on top of a :class:`NodeService`."""

    _api: ClassVar[str] = "v1beta1"
    _pb: ClassVar[Any] = v1beta1
    _shares: ClassVar[bool] = False
