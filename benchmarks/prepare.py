"""NodePrepareResources latency and throughput through the real kubelet sockets.

A :class:`drakit.node.daemon.Node` runs in this process on the simulated ``h200-8gpu-8ainic``
profile with the ``cpu``, ``nvidia_gpu`` and ``amd_ainic`` backends (each under its own driver) and
``serve_kubelet=True``; it is driven over gRPC on its Unix sockets by
:class:`drakit.kubelet.client.KubeletClient`, exactly as the kubelet drives it. Each prepare
includes the pipeline's GET of the ResourceClaim from the :class:`~benchmarks.claims.ClaimStore`
(a dict, or the real API server with ``--cluster``), the checkpoint writes and the CDI spec; each
prepare is followed by the unprepare of the same claim.

Baselines:

* ``grpc_empty_prepare``: one NodePrepareResources call with no claims on the same socket, same
  client, interleaved with the measured calls (the transport floor: gRPC + protobuf + the
  thread hop, no pipeline work);
* ``grpc_empty_pairs_16``: empty prepare+unprepare pairs per second with the same 16 threads
  (the transport ceiling for the throughput figure).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.claims import ClaimStore
from benchmarks.common import Baseline, Report, median, p99, repeat_timed

from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp
from drakit.kubelet.client import KubeletClient
from drakit.models import ClaimRef
from drakit.node.daemon import Node
from drakit.prepare.pipeline import ClaimSource

__all__ = [
    "GPU",
    "NIC",
    "NODE",
    "PROFILE",
    "NodeHarness",
    "run_claim_get",
    "run_latency",
    "run_throughput",
    "running_node",
]

PROFILE = "h200-8gpu-8ainic"
NODE = "bench-node"
GPU = "gpu.nvidia.drakit.io"
NIC = "ainic.amd.drakit.io"
CPU = "cpu.drakit.io"


@dataclass
class NodeHarness:
    """A running in-process node and one kubelet client per driver."""

    node: Node
    clients: dict[str, KubeletClient]


@contextlib.contextmanager
def running_node(claims: ClaimSource) -> Iterator[NodeHarness]:
    """Start a node on the simulated profile (in /dev/shm) that reads claims from ``claims``."""
    with tempfile.TemporaryDirectory(prefix="drakit-bench-", dir=fast_tmp()) as tmp:
        root = Path(tmp)
        (root / "kubelet" / "plugins_registry").mkdir(parents=True)
        settings = DrakitSettings(
            profile=PROFILE,
            # The backends whose claims are measured, each under its own driver as in the
            # baselines' runs: with the composite enabled its members share its driver (one
            # socket, one lock), which measures composition, not the prepare path.
            plugins={"cpu": {}, "nvidia_gpu": {}, "amd_ainic": {}},
            node_name=NODE,
            kubelet_dir=root / "kubelet",
            cdi_dir=root / "cdi",
            state_dir=root / "state",
            metrics={"enabled": False},
            log_level="WARNING",
        )
        node = Node(settings, claims=claims, boot_id="bench-boot", instance_id="bench")
        node.start()
        clients: dict[str, KubeletClient] = {}
        try:
            for driver, server in node.servers.items():
                clients[driver] = KubeletClient(server.registration_socket)
            yield NodeHarness(node, clients)
        finally:
            for c in clients.values():
                c.close()
            node.stop(grace=1)


def gpu_results(n: int) -> list[dict[str, Any]]:
    """Allocation results for GPUs ``gpu-0`` .. ``gpu-<n-1>``."""
    return [
        {"request": "gpus", "driver": GPU, "pool": NODE, "device": f"gpu-{i}"} for i in range(n)
    ]


def _check(ref: ClaimRef, error: str, what: str) -> None:
    if error:
        raise RuntimeError(f"{what} of claim {ref.name} failed: {error}")


def run_latency(
    report: Report, store: ClaimStore, harness: NodeHarness, iterations: int, warmup: int
) -> None:
    """Figure 1: prepare (and unprepare) latency p50/p99 for 1- and 8-GPU claims."""
    client = harness.clients[GPU]
    empty: list[float] = []
    measured: dict[int, tuple[list[float], list[float]]] = {}
    for n in (1, 8):
        ref = store.add(f"lat-{n}-{uuid.uuid4().hex[:6]}", gpu_results(n))
        prep: list[float] = []
        unprep: list[float] = []
        for i in range(warmup + iterations):
            t0 = time.perf_counter()
            client.prepare([])
            t1 = time.perf_counter()
            res = client.prepare([ref])[ref.uid]
            t2 = time.perf_counter()
            err = client.unprepare([ref])[ref.uid].error
            t3 = time.perf_counter()
            _check(ref, res.error, "prepare")
            _check(ref, err, "unprepare")
            if len(res.devices) != n:
                raise RuntimeError(f"prepared {len(res.devices)} devices, wanted {n}")
            if i >= warmup:
                empty.append(t1 - t0)
                prep.append(t2 - t1)
                unprep.append(t3 - t2)
        measured[n] = (prep, unprep)
    src = store.source
    key = f"grpc_empty_prepare_{src}"
    report.baseline(
        Baseline(
            key,
            median(empty) * 1e3,
            "ms",
            "median of an empty NodePrepareResources gRPC round trip (same socket and client, "
            f"interleaved with the prepares; claims from {src})",
            samples=len(empty),
        )
    )
    base_p99 = round(p99(empty) * 1e3, 3)
    for n, (prep, unprep) in measured.items():
        dev = "device" if n == 1 else "devices"
        for label, samples in (("prepare", prep), ("unprepare", unprep)):
            for stat, value in (("p50", median(samples)), ("p99", p99(samples))):
                report.add(
                    "prepare",
                    f"{label} {stat}, {n} GPU {dev}, claims from {src}",
                    value * 1e3,
                    "ms",
                    key,
                    samples=len(samples),
                    baseline_p99_ms=base_p99,
                )


def run_claim_get(report: Report, store: ClaimStore, claims: ClaimSource, samples: int) -> None:
    """The claim GET on its own (what separates the two claim sources), p50 and p99."""
    ref = store.add(f"get-{uuid.uuid4().hex[:6]}", gpu_results(1))
    times = repeat_timed(lambda: claims.get_resource_claim(ref.namespace, ref.name), samples, 3)
    key = f"grpc_empty_prepare_{store.source}"
    for stat, value in (("p50", median(times)), ("p99", p99(times))):
        report.add(
            "prepare",
            f"claim GET alone {stat} (the pipeline's ClaimSource), claims from {store.source}",
            value * 1e3,
            "ms",
            key if key in report.baselines else None,
            samples=len(times),
        )


def _hammer(
    threads: int, seconds: float, work: Callable[[int], None]
) -> tuple[int, float, list[BaseException]]:
    """Run ``work(i)`` in a loop on ``threads`` threads for ``seconds``; count the loops."""
    stop = threading.Event()
    start = threading.Barrier(threads + 1)
    counts = [0] * threads
    errors: list[BaseException] = []

    def loop(i: int) -> None:
        start.wait()
        try:
            while not stop.is_set():
                work(i)
                counts[i] += 1
        except Exception as exc:  # noqa: BLE001 - the caller raises the first one
            errors.append(exc)

    pool = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join(timeout=120)
    elapsed = time.perf_counter() - began
    return sum(counts), elapsed, errors


def run_throughput(
    report: Report, store: ClaimStore, harness: NodeHarness, seconds: float, threads: int = 16
) -> None:
    """Figure 2: claims/s prepared+unprepared with 16 claims in flight at once.

    Two mixes: ``gpu+nic`` (8 one-GPU claims and 8 one-NIC claims: every exclusive device of
    the profile, two drivers), and ``cpu`` (16 claims of 4 CPUs each, on the CPU driver's two
    shared NUMA devices, each with its own ``shareID`` as the scheduler gives consumable
    capacity).
    """
    src = store.source
    clients = harness.clients

    def empty(i: int) -> None:
        c = clients[GPU] if i % 2 == 0 else clients[NIC]
        c.prepare([])
        c.unprepare([])

    n_empty, t_empty, errs = _hammer(threads, seconds, empty)
    if errs:
        raise RuntimeError(f"empty round trips failed: {errs[0]!r}")
    key = f"grpc_empty_pairs_{threads}_{src}"
    report.baseline(
        Baseline(
            key,
            n_empty / t_empty,
            "pairs/s",
            f"empty NodePrepareResources+NodeUnprepareResources pairs per second, {threads} "
            "threads alternating the GPU and NIC sockets",
            samples=n_empty,
        )
    )

    mixes: dict[str, list[tuple[str, ClaimRef]]] = {"gpu+nic": [], "cpu": []}
    for i in range(threads):
        half = threads // 2
        driver, device = (GPU, f"gpu-{i}") if i < half else (NIC, f"ainic-{i - half}")
        result = {"request": "dev", "driver": driver, "pool": NODE, "device": device}
        mixes["gpu+nic"].append((driver, store.add(f"tp-{i}-{uuid.uuid4().hex[:6]}", [result])))
        cpu = {
            "request": "cpus",
            "driver": CPU,
            "pool": NODE,
            "device": f"cpu-numa-{i % 2}",
            "shareID": str(uuid.uuid4()),
            "consumedCapacity": {"cpu": "4"},
        }
        mixes["cpu"].append((CPU, store.add(f"tpc-{i}-{uuid.uuid4().hex[:6]}", [cpu])))

    for mix, claims in mixes.items():

        def cycle(i: int, claims: list[tuple[str, ClaimRef]] = claims) -> None:
            driver, ref = claims[i]
            c = clients[driver]
            _check(ref, c.prepare([ref])[ref.uid].error, "prepare")
            _check(ref, c.unprepare([ref])[ref.uid].error, "unprepare")

        done, elapsed, errs = _hammer(threads, seconds, cycle)
        if errs:
            raise RuntimeError(f"throughput ({mix}) failed: {errs[0]!r}")
        report.add(
            "throughput",
            f"{threads} concurrent claims ({mix}), claims from {src}",
            done / elapsed,
            "claims/s",
            key,
            cycles=done,
            seconds=round(elapsed, 2),
        )
