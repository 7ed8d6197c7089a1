"""Inputs and outcomes for ``test_explain_golden``: the allocator and ``explain`` on small fleets.

The outcomes in ``data/explain_golden.json`` were recorded with the allocator and ``explain``
as they were before their fleet-scale work (commit ``49235b9``, slices read with
``ResourceSlice.model_validate``; the same file comes out of the code after it): caches keyed
by device content, counters checked per set drawn from, devices shared on read, the job's
nodes given their own slices must not change a single result or reason. Regenerate only when a
change of an answer is intended, and say so in the commit:
``uv run python -m tests.unit.explain_golden``.

Two kinds of fleet, each of several nodes whose devices have the same content under different
node and pool names (as in a real fleet), read as ``drakit explain`` reads slices (one device
object per distinct device), so that anything cached by content or by device is shared:

* the allocator scenarios' generator (``tests/e2e/allocator_scenarios.py``: made-up devices with
  capacities, counters, taints, per-device node selection, and drakit's profiles), one scenario
  per fleet on three nodes; its claims are allocated one after the other on the first node, then
  the last one is explained over all three;
* drakit's ``h200-8gpu-8ainic`` shape (CPU slice, composite pairs with shared counters) on four
  nodes, some pairs in use on two, and the webhook's claims for 1, 4 and 8 pairs under each
  NUMA policy, and claims for GPUs and NICs (whose counters the pairs in use hold);
* ``drakit explain job`` (:func:`drakit.explain.job.explain_job`) over both: jobs that fit,
  fill nodes one after the other, and do not fit (with every node's reasons).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.allocator_scenarios import CLASSES, NODE_LABEL, all_profile_classes, generate

from drakit.allocator import AllocationError, Allocator, DeviceClass, Node, ResourceClaim
from drakit.allocator.cel import DeviceEnv
from drakit.explain.job import explain_job
from drakit.explain.report import explain
from drakit.explain.sources import parse_slices
from drakit.node.fleet import load_shape
from drakit.publish.render import render_pool

GOLDEN = Path(__file__).with_name("data") / "explain_golden.json"
SCENARIOS = 60
JOB_SCENARIOS = 25
PAIRS = "pairs.composite.drakit.io"

#: ``drakit deviceclasses`` of the default configuration (the benchmark's classes).
DRAKIT_CLASSES = {
    "cpu": 'device.driver == "cpu.drakit.io"',
    "nvidia-gpu": f'device.driver == "{PAIRS}" && (device.attributes["{PAIRS}"].type in '
    '["gpu","mig"])',
    "amd-ainic": f'device.driver == "{PAIRS}" && (device.attributes["{PAIRS}"].type in '
    '["pf","vf","shared"])',
    "gpu-nic-pair": f'device.driver == "{PAIRS}" && (device.attributes["{PAIRS}"].type in '
    '["gpu-nic-pair"])',
    "gpu-nic-pair-numa0": f'device.driver == "{PAIRS}" && (device.attributes["{PAIRS}"].type in '
    '["gpu-nic-pair"]) && (has(device.attributes["resource.kubernetes.io"].numaNode) && '
    'device.attributes["resource.kubernetes.io"].numaNode == 0)',
    "gpu-nic-pair-numa1": f'device.driver == "{PAIRS}" && (device.attributes["{PAIRS}"].type in '
    '["gpu-nic-pair"]) && (has(device.attributes["resource.kubernetes.io"].numaNode) && '
    'device.attributes["resource.kubernetes.io"].numaNode == 1)',
}


def classes(extra: dict[str, str]) -> dict[str, DeviceClass]:
    """DeviceClasses by name from ``name -> selector``."""
    return {
        n: DeviceClass.model_validate(
            {"metadata": {"name": n}, "spec": {"selectors": [{"cel": {"expression": e}}]}}
        )
        for n, e in extra.items()
    }


def _claim(name: str, devices: dict[str, Any], allocation: Any = None) -> ResourceClaim:
    body: dict[str, Any] = {
        "metadata": {"namespace": "g", "name": name, "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }
    if allocation is not None:
        body["status"] = {"allocation": allocation}
    return ResourceClaim.model_validate(body)


def _strip(obj: Any) -> Any:
    """Share IDs are random UUIDs: left out."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k != "shareID"}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def scenario_fleet(i: int) -> dict[str, Any]:
    """Scenario ``i`` on three nodes: allocations on the first, the last claim explained."""
    names = [f"g{i}-{x}" for x in "abc"]
    scs = [generate(23, i, n) for n in names]
    raw = [s for sc in scs for s in sc.slices]
    slices = parse_slices(raw, "scenario")
    cls = classes({**CLASSES, **all_profile_classes(), **scs[0].extra_classes})
    nodes = [Node.named(n, {NODE_LABEL: n}) for n in names]
    allocated: list[ResourceClaim] = []
    steps: list[Any] = []
    for j, spec in enumerate(scs[0].claims[:-1]):
        c = _claim(f"c{j}", spec)
        try:
            out = Allocator(nodes[0], slices, cls, allocated).allocate([c])
        except AllocationError as e:
            steps.append(f"error: {e}")
            continue
        if out is None:
            steps.append(None)
            continue
        api = out[0].to_api()
        steps.append(_strip(api))
        allocated.append(_claim(f"c{j}", spec, api))
    last = _claim("last", scs[0].claims[-1])
    ex = explain(last, slices, cls, allocated, nodes)
    return {"kind": scs[0].kind, "steps": steps, "explain": _strip(ex.model_dump())}


def drakit_fleet_slices(nodes: int) -> list[dict[str, Any]]:
    """``h200-8gpu-8ainic`` under the default configuration on ``nodes`` nodes (API JSON)."""
    shape = load_shape("h200-8gpu-8ainic")
    return [s for n in range(nodes) for p in shape.for_node(f"h{n}") for s in render_pool(p)]


def pairs_claim(pairs: int, policy: str) -> dict[str, Any]:
    """``spec.devices`` the webhook makes for ``pairs`` pairs under ``policy``."""
    if policy == "none":
        return {
            "requests": [
                {"name": "pairs", "exactly": {"deviceClassName": "gpu-nic-pair", "count": pairs}}
            ]
        }
    if policy == "required":
        return {
            "requests": [
                {"name": "pairs", "exactly": {"deviceClassName": "gpu-nic-pair", "count": pairs}}
            ],
            "constraints": [{"matchAttribute": "resource.kubernetes.io/numaNode"}],
        }
    return {
        "requests": [
            {
                "name": "pairs",
                "firstAvailable": [
                    {"name": "aligned", "deviceClassName": "gpu-nic-pair", "count": pairs},
                    {"name": "fallback-1", "deviceClassName": "gpu-nic-pair", "count": pairs},
                    {"name": "any", "deviceClassName": "gpu-nic-pair", "count": pairs},
                ],
            }
        ],
        "constraints": [
            {"requests": ["pairs/aligned"], "matchAttribute": "resource.kubernetes.io/numaNode"},
            {"requests": ["pairs/fallback-1"], "matchAttribute": f"{PAIRS}/socket"},
        ],
    }


def drakit_fleet(raw: list[dict[str, Any]]) -> list[Any]:
    """The webhook's pair claims explained over the fleet, with pairs in use on h1 and h3."""
    slices = parse_slices(raw, "fleet")
    cls = classes(DRAKIT_CLASSES)
    busy = {"h1": [0, 1, 2, 3, 4, 5], "h3": [0, 4, 5]}
    allocated = [
        _claim(
            f"busy-{node}",
            {"requests": []},
            {
                "devices": {
                    "results": [
                        {"request": "pairs", "driver": PAIRS, "pool": node, "device": f"pair-{k}"}
                        for k in ks
                    ]
                }
            },
        )
        for node, ks in busy.items()
    ]
    out: list[Any] = []
    for pairs in (1, 4, 8):
        for policy in ("none", "preferred", "required"):
            ex = explain(
                _claim(f"p{pairs}-{policy}", pairs_claim(pairs, policy)), slices, cls, allocated
            )
            out.append(_strip(ex.model_dump()))
    for cls_name, count in (("nvidia-gpu", 3), ("nvidia-gpu", 8), ("amd-ainic", 8)):
        spec = {
            "requests": [{"name": "r", "exactly": {"deviceClassName": cls_name, "count": count}}]
        }
        ex = explain(_claim(f"{cls_name}-{count}", spec), slices, cls, allocated)
        out.append(_strip(ex.model_dump()))
    return out


def scenario_jobs(i: int) -> Any:
    """``drakit explain job``: scenario ``i``'s last claim for 1-4 pods over its three nodes."""
    names = [f"j{i}-{x}" for x in "abc"]
    scs = [generate(29, i, n) for n in names]
    slices = parse_slices([s for sc in scs for s in sc.slices], "scenario")
    cls = classes({**CLASSES, **all_profile_classes(), **scs[0].extra_classes})
    nodes = [Node.named(n, {NODE_LABEL: n, "zone": "z"}) for n in names]
    claim = _claim("job", scs[0].claims[-1])
    return [
        _strip(explain_job(claim, slices, cls, [], nodes, pods=p, topology_key="zone").model_dump())
        for p in (1, 2, 4)
    ]


def drakit_jobs(raw: list[dict[str, Any]]) -> list[Any]:
    """Pair jobs over the fleet's nodes in two fabrics (h0, h2 / h1, h3), h1 and h3 partly busy."""
    slices = parse_slices(raw, "fleet")
    cls = classes(DRAKIT_CLASSES)
    nodes = [Node.named(f"h{n}", {"fabric": f"f{n % 2}"}) for n in range(4)]
    busy = [
        _claim(
            "busy-h3",
            {"requests": []},
            {
                "devices": {
                    "results": [
                        {"request": "pairs", "driver": PAIRS, "pool": "h3", "device": f"pair-{k}"}
                        for k in (0, 1, 2, 3, 4)
                    ]
                }
            },
        )
    ]
    out: list[Any] = []
    for pairs, pods in ((8, 2), (4, 3), (4, 4), (2, 7), (1, 30)):
        ex = explain_job(
            _claim(f"job-{pairs}", pairs_claim(pairs, "preferred")),
            slices,
            cls,
            busy,
            nodes,
            pods=pods,
            topology_key="fabric",
        )
        out.append(_strip(ex.model_dump()))
    return out


def outcomes() -> dict[str, Any]:
    """Everything the golden file records, computed now (CEL cache cold)."""
    DeviceEnv.clear()
    raw = drakit_fleet_slices(4)
    return {
        "scenarios": [scenario_fleet(i) for i in range(SCENARIOS)],
        "drakit": drakit_fleet(raw),
        "jobs": [scenario_jobs(i) for i in range(JOB_SCENARIOS)],
        "drakit_jobs": drakit_jobs(raw),
    }


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(outcomes(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
