"""grpcio's threaded server against its asyncio server, for the DRA node service (issue 8).

Both serve drakit's own ``DRAPluginV1Servicer`` logic on a Unix socket: the threaded server
exactly as :class:`drakit.kubelet.KubeletPluginServer` runs it (a ``ThreadPoolExecutor`` of 8
workers), the asyncio server with an ``async`` servicer that calls the same ``NodeService`` on
a worker thread (``asyncio.to_thread``: the pipeline blocks on fsync and the claim GET, so it
cannot run on the event loop) or inline (``--inline``, the best case: no hop at all). The handler
is a no-op that returns one device per claim, so only the transport is measured.

Figures: p50/p99 of one NodePrepareResources with one claim, sequential (one client thread),
and calls/s with 16 client threads. Usage::

    uv run python -m benchmarks.transport [-n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from drakit.kubelet._proto import dra_v1_pb2 as v1
from drakit.kubelet._proto import dra_v1_pb2_grpc as v1_grpc
from drakit.kubelet.dra import DRAPluginV1Servicer, NodeService
from drakit.models import ClaimPrepareResult, ClaimRef, ClaimUnprepareResult, PreparedDeviceRef

DRIVER = "gpu.example.com"


class _Handler:
    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimPrepareResult]:
        return {
            c.uid: ClaimPrepareResult(
                devices=[
                    PreparedDeviceRef(
                        requests=["r"], pool="p", device="d", cdi_device_ids=[f"k8s/c={c.uid}"]
                    )
                ]
            )
            for c in claims
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimUnprepareResult]:
        return {c.uid: ClaimUnprepareResult() for c in claims}


class _AioServicer(v1_grpc.DRAPluginServicer):
    def __init__(self, sync: DRAPluginV1Servicer, *, inline: bool) -> None:
        self._sync = sync
        self._inline = inline

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: Any
    ) -> v1.NodePrepareResourcesResponse:
        if self._inline:
            return self._sync.NodePrepareResources(request, context)
        return await asyncio.to_thread(self._sync.NodePrepareResources, request, context)

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: Any
    ) -> v1.NodeUnprepareResourcesResponse:
        return self._sync.NodeUnprepareResources(request, context)


def _request() -> v1.NodePrepareResourcesRequest:
    return v1.NodePrepareResourcesRequest(
        claims=[v1.Claim(namespace="ns", name="c", uid="0b5e8e9e-6c5b-4c1e-9d7e-1c2a3b4c5d6e")]
    )


def _drive(sock: Path, n: int) -> tuple[float, float, float, float]:
    """(p50 ms, p99 ms, calls/s with 16 threads, client+server CPU ms per call)."""
    req = _request()
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        stub = v1_grpc.DRAPluginStub(ch)
        for _ in range(200):
            stub.NodePrepareResources(req, timeout=10)
        lat = []
        for _ in range(n):
            t0 = time.perf_counter()
            stub.NodePrepareResources(req, timeout=10)
            lat.append((time.perf_counter() - t0) * 1e3)
        lat.sort()
        stop = time.monotonic() + 3.0
        counts = [0] * 16

        def loop(i: int) -> None:
            while time.monotonic() < stop:
                stub.NodePrepareResources(req, timeout=10)
                counts[i] += 1

        cpu0 = time.process_time()
        t0 = time.monotonic()
        threads = [threading.Thread(target=loop, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        cpu = (time.process_time() - cpu0) / max(1, sum(counts)) * 1e3
    return statistics.median(lat), lat[int(len(lat) * 0.99)], sum(counts) / took, cpu


def threaded(sock: Path, n: int) -> tuple[float, float, float, float]:
    """The server as KubeletPluginServer builds it."""
    executor = ThreadPoolExecutor(max_workers=8)
    server = grpc.server(executor)
    v1_grpc.add_DRAPluginServicer_to_server(
        DRAPluginV1Servicer(NodeService(DRIVER, _Handler(), serialize=False)), server
    )
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    try:
        return _drive(sock, n)
    finally:
        server.stop(0).wait()
        executor.shutdown()


def asyncio_server(sock: Path, n: int, *, inline: bool) -> tuple[float, float, float, float]:
    """grpc.aio on its own event-loop thread; the client drives it from this thread."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, grpc.aio.Server] = {}

    async def serve() -> None:
        server = grpc.aio.server()
        sync = DRAPluginV1Servicer(NodeService(DRIVER, _Handler(), serialize=False))
        v1_grpc.add_DRAPluginServicer_to_server(_AioServicer(sync, inline=inline), server)
        server.add_insecure_port(f"unix:{sock}")
        await server.start()
        holder["s"] = server
        ready.set()
        await server.wait_for_termination()

    t = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    t.start()
    ready.wait(10)
    try:
        return _drive(sock, n)
    finally:
        stopped = asyncio.run_coroutine_threadsafe(holder["s"].stop(0), loop)
        with contextlib.suppress(TimeoutError):
            stopped.result(30)
        t.join(10)


def main() -> None:
    """Print one Markdown table row per server."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000, help="sequential calls per server")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="dkt", dir="/tmp"))
    print(f"load {os.getloadavg()}")
    print("| server | p50 ms | p99 ms | calls/s, 16 threads | CPU ms per call (16 threads) |")
    print("|---|---:|---:|---:|---:|")
    runs: list[tuple[str, Callable[[Path], tuple[float, float, float, float]]]] = [
        ("threaded (ThreadPoolExecutor, 8)", lambda s: threaded(s, a.n)),
        ("asyncio, handler via to_thread", lambda s: asyncio_server(s, a.n, inline=False)),
        ("asyncio, handler inline", lambda s: asyncio_server(s, a.n, inline=True)),
    ]
    for i, (label, fn) in enumerate(runs * 2):  # twice, interleaved
        p50, p99, rate, cpu = fn(d / f"s{i}.sock")
        print(f"| {label} | {p50:.3f} | {p99:.3f} | {rate:.0f} | {cpu:.3f} |")


if __name__ == "__main__":
    main()
