"""Publishing 1,000 devices to a real API server, and the writes made in steady state.

A :class:`drakit.publish.publisher.ResourceSlicePublisher` publishes one pool of 1,000 GPU-like
devices
(six attributes and one capacity each: eight slices of at most 128 devices) for a fresh Node.

* ``publish``: one :meth:`~drakit.publish.publisher.ResourceSlicePublisher.sync_once` on an empty
  server (LIST, render, eight creates), repeated on fresh nodes; the median is reported, and the
  second ``sync_once`` of each round (LIST and compare, no writes) too.
* ``steady state``: the publisher's own loop (:meth:`~ResourceSlicePublisher.run`, with its
  watch and a 5-second resync interval, so several full resyncs happen) runs for N seconds after
  the first sync; the writes it sends are counted. The expected value is 0.

Baseline ``list_empty``: one LIST of ResourceSlices with a ``spec.nodeName`` field selector that
matches nothing, through the same :class:`drakit.kube.KubeClient` (TLS, auth, JSON decode: the
cheapest request the publisher makes).
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from typing import TYPE_CHECKING

from benchmarks.common import Baseline, Report, median, repeat_timed

from drakit.kube import KubeClient
from drakit.models import Device, DeviceAttribute, DeviceCapacity
from drakit.publish.publisher import ResourceSlicePublisher
from drakit.publish.render import PoolSpec

if TYPE_CHECKING:
    from tests.e2e.controlplane import ControlPlane

__all__ = ["DEVICES", "run_publish"]

DRIVER = "gpu.bench.drakit.io"
DEVICES = 1000


def thousand_devices(n: int = DEVICES) -> tuple[Device, ...]:
    """GPU-like devices: index, uuid, product, NUMA node, PCIe root, type; memory capacity."""
    return tuple(
        Device(
            name=f"gpu-{i}",
            attributes={
                "index": DeviceAttribute(int=i),
                "uuid": DeviceAttribute(string=f"GPU-{uuid.UUID(int=i)}"),
                "productName": DeviceAttribute(string="NVIDIA H200"),
                "numaNode": DeviceAttribute(int=i % 2),
                "resource.kubernetes.io/pcieRoot": DeviceAttribute(string=f"pci0000:{i % 256:02x}"),
                "type": DeviceAttribute(string="gpu"),
            },
            capacity={"memory": DeviceCapacity(value="141Gi")},
        )
        for i in range(n)
    )


def run_publish(
    report: Report, cp: ControlPlane, rounds: int, steady_seconds: float, list_samples: int
) -> None:
    """Figure 3: time to publish 1,000 devices, and writes per minute at steady state."""
    kube = KubeClient.from_kubeconfig(cp.kubeconfig)
    try:
        lists = repeat_timed(lambda: kube.list_resource_slices("no-such-node"), list_samples, 3)
        report.baseline(
            Baseline(
                "list_empty",
                median(lists) * 1e3,
                "ms",
                "median of one LIST of ResourceSlices (fieldSelector spec.nodeName matching "
                "nothing) through drakit.kube.KubeClient on the same API server",
                samples=len(lists),
            )
        )
        devices = thousand_devices()
        first: list[float] = []
        again: list[float] = []
        pub: ResourceSlicePublisher | None = None
        creates = 0
        for r in range(rounds):
            name = f"bench-pub-{r}-{uuid.uuid4().hex[:6]}"
            node = cp.create_node(name)
            pools = [PoolSpec(driver=DRIVER, node=name, pool=name, devices=devices)]
            if pub is not None:  # the previous round's node and slices: keep LISTs comparable
                cp.delete_node(pub.node_name)
            pub = ResourceSlicePublisher(
                kube,
                name,
                functools.partial(list, pools),
                drivers={DRIVER},
                interval=5.0,
                owner_node_uid=node["metadata"]["uid"],
                record_events=False,
            )
            t0 = time.perf_counter()
            result = pub.sync_once()
            t1 = time.perf_counter()
            noop = pub.sync_once(rediscover=False)
            t2 = time.perf_counter()
            if noop.writes:
                raise RuntimeError(f"second sync wrote {noop.writes} times")
            creates = result.creates
            first.append(t1 - t0)
            again.append(t2 - t1)
        report.add(
            "publish",
            f"publish {DEVICES} devices (first sync_once, {creates} slices created)",
            median(first) * 1e3,
            "ms",
            "list_empty",
            rounds=rounds,
            all_ms=[round(x * 1e3, 1) for x in first],
        )
        report.add(
            "publish",
            f"re-sync {DEVICES} devices (sync_once, nothing to write)",
            median(again) * 1e3,
            "ms",
            "list_empty",
            rounds=rounds,
            all_ms=[round(x * 1e3, 1) for x in again],
        )
        if pub is None:
            return
        stop = threading.Event()
        writes0, syncs0 = pub.writes.total, pub.syncs
        thread = threading.Thread(target=pub.run, args=(stop,), daemon=True)
        began = time.perf_counter()
        thread.start()
        time.sleep(steady_seconds)
        stop.set()
        thread.join(timeout=30)
        elapsed = time.perf_counter() - began
        writes = pub.writes.total - writes0
        report.add(
            "publish",
            f"writes per minute at steady state ({DEVICES} devices, publisher loop)",
            writes / elapsed * 60.0,
            "writes/min",
            None,
            seconds=round(elapsed, 1),
            writes=writes,
            syncs=pub.syncs - syncs0,
            resync_interval_s=pub.interval,
        )
    finally:
        kube.close()
