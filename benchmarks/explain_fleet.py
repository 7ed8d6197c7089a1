"""``drakit explain`` and the allocator at fleet size, on drakit's own slices.

Usage::

    uv run python benchmarks/explain_fleet.py [--nodes 1000] [--job-nodes 100] [--unique] [-o FILE]

The cluster, in memory: ``--nodes`` nodes of the ``h200-8gpu-8ainic`` shape under the default
configuration, rendered by drakit's publisher code (:func:`drakit.publish.render.render_pool` of
:meth:`drakit.node.fleet.Shape.for_node`): per node the CPU slice and the composite's slices
(8 GPUs, 8 NICs, 8 GPU-NIC pairs consuming shared counters), 4 slices, 26 devices. On every other
node 6 of the 8 pairs are allocated. DeviceClasses: ``drakit deviceclasses``. The simulated
nodes publish devices of the same content (the same UUIDs and bus IDs) under their own pool
names; ``--unique`` gives every device a ``serial`` attribute of its own, as real hardware has
(no two devices alike: nothing is shared by content).

* ``parse``: the slices' API JSON read as ``drakit explain`` reads them
  (:func:`drakit.explain.sources.parse_slices`: each distinct device validated once), against
  ``ResourceSlice.model_validate`` of each slice, in the same run;
* ``explain``: one claim, the webhook's ``numa-policy: preferred`` template for 4 pairs (a
  ``firstAvailable`` ladder: one NUMA node, one socket, anywhere), explained over every node
  (:func:`drakit.explain.report.explain`, CEL caches cold each time), median of ``--repeats``,
  wall and CPU seconds of this process; the goal is under 1 s at 1,000 nodes. ``command``: parse
  and explain, what ``drakit explain`` spends after reading its files;
* ``job``: ``--job-nodes`` claims of 8 pairs each (a whole node each: a training job over that
  many nodes), placed one after the other on the first node that fits, as a scheduler would
  (:class:`drakit.allocator.Allocator`, each result added to what is allocated);
* ``explain job``: the same job as ``drakit explain job`` places it
  (:func:`drakit.explain.job.explain_job`: ``--job-nodes`` pods, every node in one domain of
  the topology key, pods placed first fit in node name order).

The CEL library is imported before anything is timed (its package loads an interactive shell,
about 0.6 s that a cold ``drakit explain`` pays once). Baseline: the calibration workload of
:mod:`benchmarks.common` (~1 ms), timed before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cel  # noqa: F401 - imported before timing: its shell's prompt_toolkit takes ~0.6 s
from benchmarks.common import calibration_workload, emit
from benchmarks.scheduler import webhook_pairs

from drakit.allocator import Allocator, DeviceClass, Node, ResourceClaim, ResourceSlice
from drakit.allocator.cel import DeviceEnv
from drakit.explain.job import JobExplanation, explain_job
from drakit.explain.report import explain
from drakit.explain.sources import parse_slices
from drakit.node.fleet import load_shape
from drakit.publish.render import render_pool

PAIRS = "pairs.composite.drakit.io"


def build(nodes: int, unique: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(slices, allocated)`` as API JSON (``unique``: a ``serial`` attribute per device)."""
    shape = load_shape("h200-8gpu-8ainic")
    slices: list[dict[str, Any]] = []
    allocated: list[dict[str, Any]] = []
    for n in range(nodes):
        name = f"node-{n}"
        for pool in shape.for_node(name):
            for s in render_pool(pool):
                if unique:
                    for d in s["spec"].get("devices") or []:
                        d["attributes"] = {
                            **d["attributes"],
                            "serial": {"string": f"{name}/{d['name']}"},
                        }
                slices.append(s)
        if n % 2:
            pairs = [
                d["name"]
                for s in slices[-4:]
                if s["spec"]["driver"] == PAIRS
                for d in s["spec"].get("devices") or []
                if d["attributes"].get("type", {}).get("string") == "gpu-nic-pair"
            ][:6]
            allocated.append(claim_json(f"busy-{n}", name, pairs))
    return slices, allocated


def claim_json(name: str, node: str, devices: list[str]) -> dict[str, Any]:
    results = [{"request": "pairs", "driver": PAIRS, "pool": node, "device": d} for d in devices]
    return {
        "metadata": {"namespace": "bench", "name": name, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def run_job(
    slices: list[ResourceSlice],
    classes: dict[str, DeviceClass],
    allocated: list[ResourceClaim],
    claims: int,
) -> tuple[int, int, float]:
    """Whole nodes of 8 pairs, first fit, one after the other: (placed, allocator calls, s)."""
    job = ResourceClaim.model_validate(
        {
            "metadata": {"namespace": "bench", "name": "job"},
            "spec": {"devices": webhook_pairs(8, "none")},
        }
    )
    by_node: dict[str, list[ResourceSlice]] = {}
    for s in slices:
        by_node.setdefault(s.spec.node_name or "", []).append(s)
    taken: list[ResourceClaim] = list(allocated)
    busy = {c.status.allocation.devices.results[0].pool for c in allocated if c.status.allocation}
    DeviceEnv.clear()
    placed = tried = 0
    t = time.perf_counter()
    for i in range(claims):
        for node in sorted(by_node):
            if node in busy:
                continue
            tried += 1
            out = Allocator(Node.named(node), by_node[node], classes, allocated=taken).allocate(
                [job]
            )
            if out is not None:
                results = [r.to_api() for r in out[0].devices.results]
                taken.append(
                    ResourceClaim.model_validate(
                        {
                            "metadata": {
                                "namespace": "bench",
                                "name": f"job-{i}",
                                "uid": f"job-{i}",
                            },
                            "spec": job.spec.model_dump(by_alias=True, exclude_none=True),
                            "status": {"allocation": {"devices": {"results": results}}},
                        }
                    )
                )
                busy.add(node)
                placed += 1
                break
    job_s = time.perf_counter() - t
    return placed, tried, job_s


def explain_job_run(
    slices: list[ResourceSlice],
    classes: dict[str, DeviceClass],
    allocated: list[ResourceClaim],
    nodes: int,
    pods: int,
) -> tuple[float, JobExplanation]:
    """``drakit explain job``: ``pods`` pods of 8 pairs, every node in one fabric (CEL cold)."""
    claim = ResourceClaim.model_validate(
        {
            "metadata": {"namespace": "bench", "name": "job"},
            "spec": {"devices": webhook_pairs(8, "none")},
        }
    )
    members = [Node.named(f"node-{n}", {"fabric": "f0"}) for n in range(nodes)]
    DeviceEnv.clear()
    t = time.perf_counter()
    ex = explain_job(claim, slices, classes, allocated, members, pods=pods, topology_key="fabric")
    return time.perf_counter() - t, ex


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--job-nodes", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--unique", action="store_true", help="no two devices alike (a serial each)")
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args(argv)
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    raw_slices, raw_allocated = build(args.nodes, args.unique)
    drakit = str(Path(sys.executable).with_name("drakit"))
    raw_classes = json.loads(
        subprocess.run(
            [drakit, "deviceclasses", "-o", "json"], capture_output=True, text=True, check=True
        ).stdout
    )["items"]
    t0 = time.perf_counter()
    plain = [ResourceSlice.model_validate(s) for s in raw_slices]
    parse_plain_s = time.perf_counter() - t0
    classes = {c.name: c for c in (DeviceClass.model_validate(x) for x in raw_classes)}
    allocated = [ResourceClaim.model_validate(c) for c in raw_allocated]
    claim = ResourceClaim.model_validate(
        {
            "metadata": {"namespace": "bench", "name": "four-pairs"},
            "spec": {"devices": webhook_pairs(4, "preferred")},
        }
    )
    times: list[float] = []
    cpu: list[float] = []
    parse: list[float] = []
    calib: list[float] = []
    fits = 0
    slices: list[ResourceSlice] = []
    for _ in range(args.repeats):
        DeviceEnv.clear()
        c0 = time.perf_counter()
        calibration_workload()
        calib.append(time.perf_counter() - c0)
        t = time.perf_counter()
        slices = parse_slices(raw_slices, "slices")
        parse.append(time.perf_counter() - t)
        t, p = time.perf_counter(), time.process_time()
        ex = explain(claim, slices, classes, allocated)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - p)
        fits = sum(n.fits for n in ex.nodes)
    assert slices == plain, "parse_slices must read what model_validate reads"
    placed, tried, job_s = run_job(slices, classes, allocated, args.job_nodes)
    ej_s, ej = explain_job_run(slices, classes, allocated, args.nodes, args.job_nodes)
    med_c = statistics.median(calib)
    report = {
        "meta": {
            "command": " ".join(sys.argv),
            "load_start": load_start,
            "load_end": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        },
        "nodes": args.nodes,
        "slices": len(raw_slices),
        "devices": sum(len(s["spec"].get("devices") or []) for s in raw_slices),
        "unique_devices": args.unique,
        "nodes_that_fit": fits,
        "parse_median_s": round(statistics.median(parse), 3),
        "parse_model_validate_s": round(parse_plain_s, 3),
        "parse_ratio": round(statistics.median(parse) / parse_plain_s, 3),
        "explain_median_s": round(statistics.median(times), 3),
        "explain_best_s": round(min(times), 3),
        "explain_cpu_median_s": round(statistics.median(cpu), 3),
        "explain_ratio_to_calibration": round(statistics.median(times) / med_c, 1),
        "command_median_s": round(
            statistics.median(a + b for a, b in zip(parse, times, strict=True)), 3
        ),
        "job_claims": args.job_nodes,
        "job_placed": placed,
        "job_allocator_calls": tried,
        "job_s": round(job_s, 3),
        "job_ms_per_claim": round(job_s / max(placed, 1) * 1e3, 2),
        "explain_job_pods": args.job_nodes,
        "explain_job_fits": ej.domains[0].fits,
        "explain_job_pods_placed": ej.domains[0].pods,
        "explain_job_s": round(ej_s, 3),
        "calibration_median_s": round(med_c, 4),
    }
    emit(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
