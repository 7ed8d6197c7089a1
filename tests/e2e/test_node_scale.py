"""1,000 claims prepared and unprepared through ``drakit node``'s gRPC socket, 32 in flight.

Each claim is a real ResourceClaim with ``status.allocation`` (a 1-CPU share of one of the two
grouped NUMA devices, which allow multiple allocations), so every prepare makes a real claim GET
against the API server. 32 callers each prepare a claim and then unprepare it, through the DRA
v1 socket as the kubelet does. Nothing may fail, the checkpoint and the CDI directory must end
empty, and the node's metrics must have counted every call. The timings are printed (``-s``).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeDirs,
    NodeProcess,
    allocated_claim,
    create_device_class,
)

from drakit.models import ClaimRef

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROFILE = "h200-8gpu-8ainic"
CPU = DRIVERS["cpu"]
CLAIMS = 1000
IN_FLIGHT = 32


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.timeout(900)
def test_thousand_claims_32_in_flight(  # noqa: PLR0915 - setup, load and accounting
    control_plane: ControlPlane,
    fake_node: Callable[..., dict[str, Any]],
    profile_root: Callable[[str], Path],
    namespace: str,
) -> None:
    cp = control_plane
    name = fake_node()["metadata"]["name"]
    cls = f"scale-cpu-{uuid.uuid4().hex[:6]}"
    create_device_class(cp, cls, CPU)
    dirs = NodeDirs.create("dk-scale-")
    try:
        t0 = time.monotonic()

        def make(i: int) -> ClaimRef:
            claim = allocated_claim(
                cp,
                namespace,
                f"c{i:04d}",
                [
                    {
                        "request": "cpus",
                        "driver": CPU,
                        "pool": name,
                        "device": f"cpu-numa-{i % 2}",
                        "shareID": str(uuid.uuid4()),
                        "consumedCapacity": {"cpu": "1"},
                    }
                ],
                device_class=cls,
            )
            meta = claim["metadata"]
            return ClaimRef(namespace=namespace, name=meta["name"], uid=meta["uid"])

        with ThreadPoolExecutor(max_workers=16) as pool:
            refs = list(pool.map(make, range(CLAIMS)))
        created = time.monotonic() - t0

        with NodeProcess(
            kubeconfig=cp.kubeconfig,
            node_name=name,
            dirs=dirs,
            plugins={"cpu": {}},
            sysfs_root=profile_root(PROFILE),
            instance_id="scale",
        ) as proc:
            proc.wait_ready(timeout=60)
            todo: queue.SimpleQueue[ClaimRef] = queue.SimpleQueue()
            for ref in refs:
                todo.put(ref)
            errors: list[str] = []
            prepare_s: list[float] = []
            unprepare_s: list[float] = []
            lock = threading.Lock()

            def worker() -> None:
                with proc.client(CPU, timeout=120) as client:
                    while True:
                        try:
                            ref = todo.get_nowait()
                        except queue.Empty:
                            return
                        a = time.monotonic()
                        res = client.prepare([ref])[ref.uid]
                        b = time.monotonic()
                        err = client.unprepare([ref])[ref.uid].error
                        c = time.monotonic()
                        with lock:
                            prepare_s.append(b - a)
                            unprepare_s.append(c - b)
                            if res.error or len(res.devices) != 1:
                                errors.append(f"prepare {ref.name}: {res.error or res.devices}")
                            if err:
                                errors.append(f"unprepare {ref.name}: {err}")

            t1 = time.monotonic()
            threads = [threading.Thread(target=worker) for _ in range(IN_FLIGHT)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            ran = time.monotonic() - t1
            metrics = proc.http("/metrics")[1]
            assert proc.terminate() == 0, proc.log_tail()

        print(  # the numbers for the report
            f"\n[scale] {CLAIMS} claims created in {created:.1f}s; prepare+unprepare with "
            f"{IN_FLIGHT} in flight took {ran:.1f}s ({CLAIMS / ran:.0f} claims/s); per call "
            f"p50/p99: prepare {_percentile(prepare_s, 0.5) * 1000:.0f}/"
            f"{_percentile(prepare_s, 0.99) * 1000:.0f} ms, unprepare "
            f"{_percentile(unprepare_s, 0.5) * 1000:.0f}/"
            f"{_percentile(unprepare_s, 0.99) * 1000:.0f} ms"
        )
        assert errors == []
        assert len(prepare_s) == CLAIMS
        assert dirs.checkpoint(CPU) == {}
        assert dirs.cdi_files() == []
        on = f'driver="{CPU}",result="success"'
        assert f"drakit_prepare_seconds_count{{{on}}} {CLAIMS}.0" in metrics
        assert f"drakit_unprepare_seconds_count{{{on}}} {CLAIMS}.0" in metrics
    finally:
        dirs.remove()
        cp.api("DELETE", f"{RESOURCE}/deviceclasses/{cls}")
