"""Every allocation drakit.allocator makes on generated scenarios is valid, checked independently.

The scenarios are the differential e2e test's (``tests/e2e/allocator_scenarios.py``), run here
without a cluster. Whatever the allocator picks must satisfy the claim by rules written out
again here, not by calling the allocator's own checks: the count per request, exclusive devices
used once, taints tolerated, ``matchAttribute``/``distinctAttribute``, capacity of shared devices
and shared counters not exceeded (counting earlier claims of the scenario too).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction
from typing import Any

from tests.e2e.allocator_scenarios import CLASSES, all_profile_classes, generate

from drakit.allocator import AllocationError, Allocator, DeviceClass, Node, ResourceClaim
from drakit.allocator.api import ResourceSlice
from drakit.allocator.quantity import parse_quantity

SCENARIOS = 300


def _classes() -> dict[str, DeviceClass]:
    return {
        n: DeviceClass.model_validate(
            {"metadata": {"name": n}, "spec": {"selectors": [{"cel": {"expression": e}}]}}
        )
        for n, e in {**CLASSES, **all_profile_classes()}.items()
    }


def _devices(slices: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d
        for s in slices
        for d in s["spec"].get("devices", [])
    }


def _attr(dev: dict[str, Any], driver: str, name: str) -> frozenset[Any] | None:
    attrs = dev.get("attributes", {})
    a = attrs.get(name)
    if a is None and name.startswith(driver + "/"):
        a = attrs.get(name.split("/", 1)[1])
    if a is None:
        return None
    [(_, v)] = a.items()
    return frozenset(v) if isinstance(v, list) else frozenset([v])


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    if taint["effect"] not in ("NoSchedule", "NoExecute"):
        return True
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _body(spec: dict[str, Any], request: str) -> dict[str, Any]:
    base, _, sub = request.partition("/")
    [req] = [r for r in spec["requests"] if r["name"] == base]
    if sub:
        [b] = [s for s in req["firstAvailable"] if s["name"] == sub]
        return dict(b)
    return dict(req["exactly"])


def _check(  # noqa: PLR0912 - one rule after the other
    spec: dict[str, Any],
    results: list[dict[str, Any]],
    devices: dict[tuple[str, str, str], dict[str, Any]],
    slices: list[dict[str, Any]],
    earlier: list[dict[str, Any]],
) -> None:
    per_request = Counter(r["request"] for r in results)
    for name, n in per_request.items():
        body = _body(spec, name)
        if body.get("allocationMode") != "All":
            assert n == body.get("count", 1), (name, n)
    chosen = {r["request"].partition("/")[0] for r in results}
    assert chosen == {r["name"] for r in spec["requests"]}
    everything = [*earlier, *results]
    exclusive = Counter(
        (r["driver"], r["pool"], r["device"])
        for r in everything
        if not r.get("shareID") and not r.get("adminAccess")
    )
    assert all(n == 1 for n in exclusive.values()), exclusive
    for r in results:
        key = (r["driver"], r["pool"], r["device"])
        dev = devices[key]
        body = _body(spec, r["request"])
        for taint in dev.get("taints", []):
            assert _tolerated(taint, body.get("tolerations", [])), (r, taint)
        assert bool(r.get("shareID")) == bool(dev.get("allowMultipleAllocations")), r
    for c in spec.get("constraints", []):
        attr = c.get("matchAttribute") or c["distinctAttribute"]
        names = set(c.get("requests", []))
        members = [
            r
            for r in results
            if not names or r["request"] in names or r["request"].partition("/")[0] in names
        ]
        values = [
            _attr(devices[(r["driver"], r["pool"], r["device"])], r["driver"], attr)
            for r in members
        ]
        assert all(v is not None for v in values), (c, members)
        sets = [v for v in values if v is not None]
        if c.get("matchAttribute") and sets:
            assert frozenset.intersection(*sets), (c, sets)
        if c.get("distinctAttribute"):
            for i, a in enumerate(sets):
                assert all(not (a & b) for b in sets[i + 1 :]), (c, sets)
    used: dict[tuple[str, str, str], dict[str, Fraction]] = defaultdict(dict)
    for r in everything:
        for k, v in (r.get("consumedCapacity") or {}).items():
            key = (r["driver"], r["pool"], r["device"])
            used[key][k] = used[key].get(k, Fraction(0)) + parse_quantity(v)
    for key, caps in used.items():
        for k, v in caps.items():
            assert v <= parse_quantity(devices[key]["capacity"][k]["value"]), (key, k, v)
    counters: dict[tuple[str, str, str, str], Fraction] = {}
    for s in slices:
        for cs in s["spec"].get("sharedCounters", []):
            for k, c in cs["counters"].items():
                counters[(s["spec"]["driver"], s["spec"]["pool"]["name"], cs["name"], k)] = (
                    parse_quantity(c["value"])
                )
    for key in {(r["driver"], r["pool"], r["device"]) for r in everything}:
        for use in devices[key].get("consumesCounters", []):
            for k, c in use["counters"].items():
                ck = (key[0], key[1], use["counterSet"], k)
                counters[ck] -= parse_quantity(c["value"])
    assert all(v >= 0 for v in counters.values()), counters


def test_generated_allocations_are_valid() -> None:
    classes = _classes()
    outcomes: Counter[str] = Counter()
    for i in range(SCENARIOS):
        sc = generate(11, i, f"v-{i}")
        slices = [ResourceSlice.model_validate(s) for s in sc.slices]
        devices = _devices(sc.slices)
        earlier: list[dict[str, Any]] = []
        allocated: list[ResourceClaim] = []
        for j, spec in enumerate(sc.claims):
            c = ResourceClaim.model_validate(
                {"metadata": {"name": f"c{j}", "namespace": "v"}, "spec": {"devices": spec}}
            )
            try:
                out = Allocator(Node.named(sc.node), slices, classes, allocated).allocate([c])
            except AllocationError:
                outcomes["error"] += 1
                continue
            if out is None:
                outcomes["unschedulable"] += 1
                continue
            outcomes["allocated"] += 1
            api = out[0].to_api()
            results = api["devices"]["results"]
            _check(spec, results, devices, sc.slices, earlier)
            earlier += results
            allocated.append(
                ResourceClaim.model_validate(
                    {
                        "metadata": {"name": f"c{j}", "namespace": "v"},
                        "spec": {"devices": spec},
                        "status": {"allocation": api},
                    }
                )
            )
    assert outcomes["allocated"] > SCENARIOS // 3, outcomes
    assert outcomes["unschedulable"], outcomes
