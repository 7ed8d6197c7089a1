"""drakit.allocator against the real kube-scheduler, on generated scenarios.

Each scenario (``allocator_scenarios.generate``) gets its own Node and ResourceSlices on the
shared control plane. Its claims are scheduled in phases: claim 0 of every scenario, then claim
1, then claim 2; a pod per claim is pinned to the scenario's node. After each phase, every
claim is run through drakit's allocator with the same slices and classes and, as already
allocated, the scenario's earlier claims as the scheduler allocated them. The outcomes must be
the same: allocated with the same devices (request, driver, pool, device, in order), the same
consumed capacity, share IDs and admin access where the scheduler set them, and the same
allocation node selector; or unschedulable ("cannot allocate all claims"); or a scheduling
error (a Filter error, such as ``All`` over a pool that is being updated).

The whole run is one test (scenarios are batched so the control plane is shared). ``DRAKIT_
ALLOC_SEED`` and ``DRAKIT_ALLOC_SCENARIOS`` change the seed (default 1) and the number (320).
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from tests.e2e.allocator_scenarios import (
    CLASSES,
    NODE_LABEL,
    Scenario,
    all_profile_classes,
    generate,
)
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, wait_for
from tests.e2e.nodeproc import create_claim, create_pod

from drakit.allocator import (
    AllocationError,
    Allocator,
    DeviceClass,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from drakit.allocator.quantity import parse_quantity

pytestmark = pytest.mark.e2e

RESOURCE = "/apis/resource.k8s.io/v1"
SEED = int(os.environ.get("DRAKIT_ALLOC_SEED", "1"))
COUNT = int(os.environ.get("DRAKIT_ALLOC_SCENARIOS", "320"))
UNSCHEDULABLE = "cannot allocate all claims"


@dataclass
class Outcome:
    """What happened to one claim: ``allocated`` (with results), ``unschedulable`` or ``error``."""

    kind: str
    results: list[dict[str, Any]]
    message: str = ""
    node_selector: dict[str, Any] | None = None


def _parallel(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(fn, items))


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[tuple[ControlPlane, str, str]]:
    """A namespace allowed adminAccess, the DeviceClasses, and cleanup of what the test made."""
    run = uuid.uuid4().hex[:5]
    ns = f"dx-{run}"
    control_plane.create_namespace(ns, {"resource.kubernetes.io/admin-access": "true"})
    classes = {**CLASSES, **all_profile_classes()}
    for name, expr in classes.items():
        control_plane.api(
            "POST",
            f"{RESOURCE}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expr}}]},
            },
        )
    try:
        yield control_plane, ns, run
    finally:
        control_plane.delete_namespace(ns)
        nodes = control_plane.api("GET", f"/api/v1/nodes?labelSelector=dx-run%3D{run}")
        _parallel(lambda n: control_plane.delete_node(n["metadata"]["name"]), nodes["items"])
        for name in classes:
            control_plane.api("DELETE", f"{RESOURCE}/deviceclasses/{name}")


def _create_scenario(cp: ControlPlane, sc: Scenario, run: str) -> None:
    cp.create_node(sc.node, labels={"dx-run": run, NODE_LABEL: sc.node})
    for s in sc.slices:
        cp.api("POST", f"{RESOURCE}/resourceslices", s)


def _submit(cp: ControlPlane, ns: str, sc: Scenario, phase: int) -> None:
    name = f"{sc.node}-c{phase}"
    create_claim(cp, ns, name, {"devices": sc.claims[phase]})
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [sc.node]}
                        ]
                    }
                ]
            }
        }
    }
    create_pod(cp, ns, name, None, claim=name, ref="c", affinity=affinity)


def _submit_at(cp: ControlPlane, ns: str, phase: int, sc: Scenario) -> None:
    _submit(cp, ns, sc, phase)


def _settled(pod: dict[str, Any]) -> Outcome | None:
    if pod["spec"].get("nodeName"):
        return Outcome("allocated", [])
    for cond in pod.get("status", {}).get("conditions", []):
        if cond["type"] != "PodScheduled" or cond["status"] != "False":
            continue
        message = cond.get("message", "")
        if UNSCHEDULABLE in message:
            return Outcome("unschedulable", [], message)
        if cond.get("reason") == "SchedulerError" and "DynamicResources" in message:
            return Outcome("error", [], message)
    return None


def _wait_phase(cp: ControlPlane, ns: str, names: set[str]) -> dict[str, Outcome]:
    found: dict[str, Outcome] = {}

    def done() -> bool:
        pods = cp.api("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            if name in names and name not in found:
                got = _settled(pod)
                if got is not None:
                    found[name] = got
        return len(found) == len(names)

    try:
        wait_for(done, timeout=240, interval=1.0, what="the scheduler to decide every pod")
    except TimeoutError:
        missing = sorted(names - set(found))
        raise AssertionError(f"{len(missing)} pods undecided, e.g. {missing[:5]}") from None
    claims = cp.api("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims")["items"]
    by_name = {c["metadata"]["name"]: c for c in claims}
    for name, out in found.items():
        if out.kind == "allocated":
            alloc = by_name[name].get("status", {}).get("allocation")
            assert alloc, f"{name}: pod bound but claim not allocated"
            out.results = alloc["devices"]["results"]
            out.node_selector = alloc.get("nodeSelector")
    return found


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    consumed = {k: parse_quantity(v) for k, v in (r.get("consumedCapacity") or {}).items()}
    return (
        r["request"],
        r["driver"],
        r["pool"],
        r["device"],
        tuple(sorted(consumed.items())),
        bool(r.get("shareID")),
        bool(r.get("adminAccess")),
    )


def _ours(
    sc: Scenario,
    phase: int,
    classes: dict[str, DeviceClass],
    earlier: list[dict[str, Any]],
) -> Outcome:
    slices = [ResourceSlice.model_validate(s) for s in sc.slices]
    allocated = [ResourceClaim.model_validate(c) for c in earlier]
    claim = ResourceClaim.model_validate(
        {"metadata": {"name": f"{sc.node}-c{phase}"}, "spec": {"devices": sc.claims[phase]}}
    )
    try:
        node = Node.named(sc.node, {NODE_LABEL: sc.node})
        got = Allocator(node, slices, classes, allocated).allocate([claim])
    except AllocationError as e:
        return Outcome("error", [], str(e))
    if got is None:
        return Outcome("unschedulable", [])
    api = got[0].to_api()
    return Outcome("allocated", api["devices"]["results"], node_selector=api.get("nodeSelector"))


@pytest.mark.timeout(600)  # ~1-2 min on 2 busy cores; creating ~2,000 slices dominates
def test_allocator_decides_like_kube_scheduler(cluster: tuple[ControlPlane, str, str]) -> None:
    cp, ns, run = cluster
    scenarios = [generate(SEED, i, f"dx-{run}-{i}") for i in range(COUNT)]
    class_specs = {**CLASSES, **all_profile_classes()}
    classes = {
        n: DeviceClass.model_validate(
            {"metadata": {"name": n}, "spec": {"selectors": [{"cel": {"expression": e}}]}}
        )
        for n, e in class_specs.items()
    }
    _parallel(lambda sc: _create_scenario(cp, sc, run), scenarios)
    # The scheduler must see every slice before the first pod: a canary slice created last
    # (slice events arrive in order) must be usable by a canary pod.
    canary = Scenario(
        f"dx-{run}-canary",
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"dx-{run}-canary"},
                "spec": {
                    "driver": "gpu.dx.drakit.io",
                    "pool": {"name": f"dx-{run}-canary", "generation": 0, "resourceSliceCount": 1},
                    "nodeName": f"dx-{run}-canary",
                    "devices": [{"name": "only"}],
                },
            }
        ],
        [{"requests": [{"name": "r", "exactly": {"deviceClassName": "dx-gpu"}}]}],
        "canary",
    )
    _create_scenario(cp, canary, run)
    _submit(cp, ns, canary, 0)
    assert _wait_phase(cp, ns, {f"{canary.node}-c0"})[f"{canary.node}-c0"].kind == "allocated"

    history: dict[str, list[dict[str, Any]]] = {sc.node: [] for sc in scenarios}
    tally: Counter[str] = Counter()
    mismatches: list[str] = []
    started = time.monotonic()
    for phase in range(3):
        batch = [sc for sc in scenarios if len(sc.claims) > phase]
        if not batch:
            break
        _parallel(functools.partial(_submit_at, cp, ns, phase), batch)
        theirs = _wait_phase(cp, ns, {f"{sc.node}-c{phase}" for sc in batch})
        for sc in batch:
            name = f"{sc.node}-c{phase}"
            mine = _ours(sc, phase, classes, history[sc.node])
            real = theirs[name]
            tally[f"{sc.kind.split(':')[0]}/{real.kind}"] += 1
            same = mine.kind == real.kind
            if same and real.kind == "allocated":
                same = [_key(r) for r in mine.results] == [_key(r) for r in real.results]
                same = same and mine.node_selector == real.node_selector
            if not same:
                mismatches.append(
                    f"{name} ({sc.kind}, seed {SEED}): scheduler {real.kind} "
                    f"{real.results or real.message} {real.node_selector}; drakit {mine.kind} "
                    f"{mine.results or mine.message} {mine.node_selector}; "
                    f"claim {sc.claims[phase]}"
                )
            if real.kind == "allocated":
                history[sc.node].append(
                    {
                        "metadata": {"name": name, "namespace": ns},
                        "spec": {"devices": sc.claims[phase]},
                        "status": {"allocation": {"devices": {"results": real.results}}},
                    }
                )
    total = sum(tally.values())
    summary = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
    print(f"\n{total} claims compared in {time.monotonic() - started:.0f}s: {summary}")
    assert not mismatches, f"{len(mismatches)} of {total} differ:\n" + "\n".join(mismatches[:10])
    assert total >= COUNT
    assert tally["made-up/allocated"]
    assert tally["made-up/unschedulable"]
    assert tally["profile/allocated"]


def test_generator_objects_are_accepted_by_the_api_server(
    cluster: tuple[ControlPlane, str, str],
) -> None:
    """Creating a scenario never fails validation (checked on a few, dry-run)."""
    cp, _, _ = cluster
    for i in range(20):
        sc = generate(SEED + 1, i, f"dry-{i}")
        for s in sc.slices:
            status, data = cp._http("POST", cp.server + f"{RESOURCE}/resourceslices?dryRun=All", s)
            if status >= 300:
                raise ControlPlaneError(f"slice rejected: {data[:400]!r}")
