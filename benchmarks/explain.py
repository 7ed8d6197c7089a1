"""``drakit explain``: one claim over 100 nodes x 64 devices.

The cluster: 100 nodes, one ResourceSlice each with 64 GPUs (8 NUMA-paired groups of 8; model,
index, numaNode, pcieRoot, memory capacity). Every device carries a unique ``uuid`` attribute,
so no two devices look alike to CEL and the per-device CEL cache cannot short-cut anything.
On every other node 60 GPUs are already allocated (one claim), so half the nodes fit and half
are explained in full (per-request exclusions, then the constraint analysis).

The claim: 4 GPUs of model H200 with 64Gi or more (two CEL selectors plus the class's), under
``matchAttribute resource.kubernetes.io/numaNode``.

Timed: :func:`drakit.explain.report.explain` from parsed objects to the explanation (parsing the
YAML is timed separately), repeated; the median and the best are reported, with the calibration
workload of :mod:`benchmarks.common` as the baseline. Run: ``uv run python -m benchmarks.explain``.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from benchmarks.common import calibration_workload

from drakit.allocator import DeviceClass, ResourceClaim, ResourceSlice
from drakit.allocator.cel import DeviceEnv
from drakit.explain.report import explain

__all__ = ["build", "run_explain"]

DRIVER = "gpu.nvidia.drakit.io"
NODES = 100
MODEL = f'device.attributes["{DRIVER}"].model == "H200"'
DEVICES = 64


def _slice(node: int) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "uuid": {"string": f"GPU-{node:04d}-{i:04d}"},
                "model": {"string": "H200" if i % 4 else "H100"},
                "index": {"int": i},
                "resource.kubernetes.io/numaNode": {"int": i // 8},
                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 2:02x}"},
            },
            "capacity": {"memory": {"value": "141Gi" if i % 4 else "80Gi"}},
        }
        for i in range(DEVICES)
    ]
    return {
        "metadata": {"name": f"node-{node}-gpu-0"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": f"node-{node}", "generation": 0, "resourceSliceCount": 1},
            "nodeName": f"node-{node}",
            "devices": devices,
        },
    }


def build() -> tuple[
    list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]
]:
    """``(slices, classes, claim, allocated)`` as API JSON."""
    slices = [_slice(n) for n in range(NODES)]
    classes = [
        {
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    ]
    claim = {
        "metadata": {"namespace": "bench", "name": "four-gpus"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu",
                            "count": 4,
                            "selectors": [
                                {"cel": {"expression": MODEL}},
                                {
                                    "cel": {
                                        "expression": f'device.capacity["{DRIVER}"].memory'
                                        '.compareTo(quantity("64Gi")) >= 0'
                                    }
                                },
                            ],
                        },
                    }
                ],
                "constraints": [{"matchAttribute": "resource.kubernetes.io/numaNode"}],
            }
        },
    }
    allocated = [
        {
            "metadata": {"namespace": "bench", "name": f"busy-{n}", "uid": f"uid-{n}"},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "r",
                                "driver": DRIVER,
                                "pool": f"node-{n}",
                                "device": f"gpu-{i}",
                            }
                            for i in range(60)
                        ]
                    }
                }
            },
        }
        for n in range(0, NODES, 2)
    ]
    return slices, classes, claim, allocated


def run_explain(repeats: int = 7) -> dict[str, Any]:
    """Time explaining the claim; returns the figures."""
    raw = build()
    t0 = time.perf_counter()
    slices = [ResourceSlice.model_validate(s) for s in raw[0]]
    classes = {c.name: c for c in (DeviceClass.model_validate(x) for x in raw[1])}
    claim = ResourceClaim.model_validate(raw[2])
    allocated = [ResourceClaim.model_validate(c) for c in raw[3]]
    parse_s = time.perf_counter() - t0
    times: list[float] = []
    calib: list[float] = []
    fits = 0
    for _ in range(repeats):
        DeviceEnv.clear()  # every run starts cold, like a fresh CLI call
        c0 = time.perf_counter()
        calibration_workload()
        calib.append(time.perf_counter() - c0)
        t = time.perf_counter()
        ex = explain(claim, slices, classes, allocated)
        times.append(time.perf_counter() - t)
        fits = sum(n.fits for n in ex.nodes)
    return {
        "nodes": NODES,
        "devices_per_node": DEVICES,
        "nodes_that_fit": fits,
        "parse_s": round(parse_s, 3),
        "explain_median_s": round(statistics.median(times), 3),
        "explain_best_s": round(min(times), 3),
        "calibration_median_s": round(statistics.median(calib), 4),
        "ratio_to_calibration": round(statistics.median(times) / statistics.median(calib), 1),
        "repeats": repeats,
    }


if __name__ == "__main__":
    print(json.dumps(run_explain(), indent=2))
