"""drakit.allocator: the scheduler's allocation semantics, one rule per test."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from drakit.allocator import (
    AllocationError,
    Allocator,
    DeviceClass,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from drakit.allocator.quantity import format_quantity, parse_quantity

GPU = "gpu.example.com"
NODE = "n1"


def dev(name: str, attrs: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A device; plain attribute values become typed ones."""
    typed = {}
    for k, v in (attrs or {}).items():
        kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string"
        typed[k] = v if isinstance(v, dict) else {kind: v}
    return {"name": name, "attributes": typed, **extra}


def slice_(
    devices: list[dict[str, Any]] | None = None,
    *,
    name: str = "s0",
    pool: str = NODE,
    driver: str = GPU,
    count: int = 1,
    generation: int = 0,
    counters: list[dict[str, Any]] | None = None,
    node: str = NODE,
) -> ResourceSlice:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "nodeName": node,
    }
    if counters is not None:
        spec["sharedCounters"] = counters
    else:
        spec["devices"] = devices or []
    return ResourceSlice.model_validate({"metadata": {"name": name}, "spec": spec})


def classes(**extra: str) -> dict[str, DeviceClass]:
    exprs = {"gpu": f'device.driver == "{GPU}"', **extra}
    return {
        n: DeviceClass.model_validate(
            {"metadata": {"name": n}, "spec": {"selectors": [{"cel": {"expression": e}}]}}
        )
        for n, e in exprs.items()
    }


def claim(
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {
                "devices": {
                    "requests": list(requests),
                    "constraints": constraints or [],
                    "config": config or [],
                }
            },
        }
    )


def req(name: str = "r", cls: str = "gpu", **body: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, **body}}


def first_available(name: str, cls: str = "gpu", **counts: int) -> dict[str, Any]:
    """A ``firstAvailable`` request: one subrequest of ``cls`` per ``name=count``, in order."""
    subs = [{"name": n, "deviceClassName": cls, "count": c} for n, c in counts.items()]
    return {"name": name, "firstAvailable": subs}


def sel(expr: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expr}}]


def run(
    slices: list[ResourceSlice],
    *claims: ResourceClaim,
    allocated: tuple[ResourceClaim, ...] = (),
    cls: dict[str, DeviceClass] | None = None,
) -> list[list[str]] | None:
    """Devices per claim (``request=device``), or None when they do not fit."""
    out = Allocator(Node.named(NODE), slices, cls or classes(), allocated).allocate(list(claims))
    if out is None:
        return None
    return [[f"{r.request}={r.device}" for r in a.devices.results] for a in out]


def allocated_claim(*results: dict[str, Any]) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": "old", "namespace": "ns"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": list(results)}}},
        }
    )


def held(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "x", "driver": GPU, "pool": NODE, "device": device, **extra}


FOUR = [dev(f"gpu-{i}", {"numa": i // 2, "model": "h200" if i % 2 else "a100"}) for i in range(4)]


def test_quantities_are_exact() -> None:
    assert parse_quantity("1Gi") == parse_quantity("1024Mi")
    assert parse_quantity("500m") * 2 == 1
    assert parse_quantity("1e3") == 1000
    assert format_quantity(parse_quantity("80Gi")) == "80Gi"
    assert format_quantity(parse_quantity("12")) == "12"
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("12 GB")


def test_first_fit_in_slice_order() -> None:
    assert run([slice_(FOUR)], claim(req(count=2))) == [["r=gpu-0", "r=gpu-1"]]


def test_request_selector_and_class_selector() -> None:
    c = claim(req(selectors=sel(f'device.attributes["{GPU}"].model == "h200"'), count=2))
    assert run([slice_(FOUR)], c) == [["r=gpu-1", "r=gpu-3"]]
    other = classes(gpu='device.driver == "other.example.com"')
    assert run([slice_(FOUR)], claim(req()), cls=other) is None


def test_cel_environment_quantity_semver_and_missing_domain() -> None:
    devices = [
        dev("small", {"fw": {"version": "1.2.0"}}, capacity={"memory": {"value": "40Gi"}}),
        dev("big", {"fw": {"version": "1.10.0"}}, capacity={"memory": {"value": "80Gi"}}),
    ]
    mem = f'device.capacity["{GPU}"].memory.compareTo(quantity("64Gi")) >= 0'
    ver = f'device.attributes["{GPU}"].fw.isGreaterThan(semver("1.9.0"))'
    assert run([slice_(devices)], claim(req(selectors=sel(mem)))) == [["r=big"]]
    assert run([slice_(devices)], claim(req(selectors=sel(ver)))) == [["r=big"]]
    # a domain the device has nothing in is an empty map, not an error
    none = claim(req(selectors=sel('"x" in device.attributes["other.io"]')))
    assert run([slice_(devices)], none) is None


def test_cel_runtime_error_aborts_the_node() -> None:
    c = claim(req(selectors=sel(f'device.attributes["{GPU}"].nosuch == 1')))
    with pytest.raises(AllocationError, match="nosuch"):
        run([slice_(FOUR)], c)


def test_unknown_class_is_an_error_naming_it() -> None:
    with pytest.raises(AllocationError, match="device class nope not found"):
        run([slice_(FOUR)], claim(req(cls="nope")))


def test_all_mode_takes_every_matching_device() -> None:
    c = claim(req(allocationMode="All", selectors=sel(f'device.attributes["{GPU}"].numa == 1')))
    assert run([slice_(FOUR)], c) == [["r=gpu-2", "r=gpu-3"]]
    # one of them in use: All cannot be satisfied
    assert run([slice_(FOUR)], c, allocated=(allocated_claim(held("gpu-3")),)) is None


def test_all_mode_refuses_incomplete_pool() -> None:
    c = claim(req(allocationMode="All"))
    with pytest.raises(AllocationError, match="currently being updated"):
        run([slice_(FOUR, count=2)], c)


def test_match_attribute_backtracks_to_the_next_value() -> None:
    # gpu-0 is held, so NUMA 0 has one free device; the pair must come from NUMA 1
    c = claim(req(count=2), constraints=[{"matchAttribute": f"{GPU}/numa"}])
    done = run([slice_(FOUR)], c, allocated=(allocated_claim(held("gpu-0")),))
    assert done == [["r=gpu-2", "r=gpu-3"]]


def test_match_attribute_across_requests() -> None:
    c = claim(
        req("a", selectors=sel(f'device.attributes["{GPU}"].model == "a100"')),
        req("b", selectors=sel(f'device.attributes["{GPU}"].model == "h200"')),
        constraints=[{"requests": ["a", "b"], "matchAttribute": f"{GPU}/numa"}],
    )
    # first a=gpu-0; b must be on NUMA 0 too: gpu-1
    assert run([slice_(FOUR)], c) == [["a=gpu-0", "b=gpu-1"]]


def test_match_attribute_unsatisfiable() -> None:
    c = claim(req(count=3), constraints=[{"matchAttribute": f"{GPU}/numa"}])
    assert run([slice_(FOUR)], c) is None


def test_distinct_attribute_spreads() -> None:
    c = claim(req(count=2), constraints=[{"distinctAttribute": f"{GPU}/numa"}])
    assert run([slice_(FOUR)], c) == [["r=gpu-0", "r=gpu-2"]]


def test_first_available_falls_back_and_backtracks() -> None:
    c = claim(first_available("p", four=4, two=2), req("extra"))
    # "four" fits alone but leaves nothing for "extra": the search goes back to "two"
    assert run([slice_(FOUR)], c) == [["p/two=gpu-0", "p/two=gpu-1", "extra=gpu-2"]]


def test_constraint_naming_a_subrequest() -> None:
    c = claim(
        first_available("p", same=3, any=3),
        constraints=[{"requests": ["p/same"], "matchAttribute": f"{GPU}/numa"}],
    )
    assert run([slice_(FOUR)], c) == [["p/any=gpu-0", "p/any=gpu-1", "p/any=gpu-2"]]


def test_taints_block_unless_tolerated() -> None:
    tainted = [
        dev("gpu-0", taints=[{"key": "unhealthy", "value": "ecc", "effect": "NoSchedule"}]),
        dev("gpu-1", taints=[{"key": "info", "effect": "None"}]),
    ]
    assert run([slice_(tainted)], claim(req())) == [["r=gpu-1"]]
    tol = [{"key": "unhealthy", "operator": "Exists", "effect": "NoSchedule"}]
    done = Allocator(Node.named(NODE), [slice_(tainted)], classes()).allocate(
        [claim(req(tolerations=tol))]
    )
    assert done is not None
    [r] = done[0].devices.results
    assert r.device == "gpu-0"
    assert r.tolerations[0].key == "unhealthy"


def test_admin_access_ignores_other_claims() -> None:
    c = claim(req(adminAccess=True))
    assert run([slice_(FOUR[:1])], c, allocated=(allocated_claim(held("gpu-0")),)) == [["r=gpu-0"]]
    assert (
        run([slice_(FOUR[:1])], claim(req()), allocated=(allocated_claim(held("gpu-0")),)) is None
    )
    # an admin-access allocation holds nothing
    admin = allocated_claim(held("gpu-0", adminAccess=True))
    assert run([slice_(FOUR[:1])], claim(req()), allocated=(admin,)) == [["r=gpu-0"]]


SHARED = dev(
    "nic-0",
    allowMultipleAllocations=True,
    capacity={
        "bandwidth": {
            "value": "100",
            "requestPolicy": {"default": "10", "validRange": {"min": "10", "step": "10"}},
        }
    },
)


def test_consumable_capacity_rounds_up_and_fills() -> None:
    a = Allocator(Node.named(NODE), [slice_([SHARED])], classes())
    out = a.allocate([claim(req(capacity={"requests": {"bandwidth": "25"}}), req("d"))])
    assert out is not None
    r1, r2 = out[0].devices.results
    assert r1.consumed_capacity == {"bandwidth": "30"}  # rounded up to the step
    assert r2.consumed_capacity == {"bandwidth": "10"}  # the default
    assert r1.share_id
    assert r2.share_id
    assert r1.share_id != r2.share_id
    assert r1.device == r2.device == "nic-0"


def test_consumable_capacity_counts_allocated_shares() -> None:
    old = allocated_claim(held("nic-0", shareID="u1", consumedCapacity={"bandwidth": "80"}))
    big = claim(req(capacity={"requests": {"bandwidth": "30"}}))
    assert run([slice_([SHARED])], big, allocated=(old,)) is None
    small = claim(req(capacity={"requests": {"bandwidth": "20"}}))
    assert run([slice_([SHARED])], small, allocated=(old,)) == [["r=nic-0"]]


def test_capacity_request_on_exclusive_device_is_a_minimum() -> None:
    devices = [
        dev("small", capacity={"memory": {"value": "40Gi"}}),
        dev("big", capacity={"memory": {"value": "80Gi"}}),
    ]
    assert run([slice_(devices)], claim(req(capacity={"requests": {"memory": "48Gi"}}))) == [
        ["r=big"]
    ]
    assert run([slice_(devices)], claim(req(capacity={"requests": {"cores": "1"}}))) is None


def test_valid_values_policy() -> None:
    d = dev(
        "x",
        allowMultipleAllocations=True,
        capacity={
            "mem": {"value": "8", "requestPolicy": {"default": "2", "validValues": ["2", "4"]}}
        },
    )
    assert run([slice_([d])], claim(req(capacity={"requests": {"mem": "3"}}))) == [["r=x"]]
    assert run([slice_([d])], claim(req(capacity={"requests": {"mem": "5"}}))) is None


COUNTERS = [{"name": "gpu-0-mem", "counters": {"memory": {"value": "8"}}}]


def part(name: str, memory: str) -> dict[str, Any]:
    return dev(
        name,
        consumesCounters=[{"counterSet": "gpu-0-mem", "counters": {"memory": {"value": memory}}}],
    )


def test_shared_counters_limit_partitions() -> None:
    slices = [
        slice_(counters=COUNTERS, name="s0", count=2),
        slice_([part("whole", "8"), part("half-a", "4"), part("half-b", "4")], name="s1", count=2),
    ]
    assert run(slices, claim(req(count=2))) == [["r=half-a", "r=half-b"]]
    assert run(slices, claim(req(count=3))) is None
    old = allocated_claim(held("half-a"))
    assert run(slices, claim(req()), allocated=(old,)) == [["r=half-b"]]


def test_counters_overdrawn_by_allocated_claims_block_the_whole_pool() -> None:
    """As before counters were checked per set drawn from: any overdrawn set fails every draw."""
    sets = [*COUNTERS, {"name": "gpu-1-mem", "counters": {"memory": {"value": "8"}}}]
    other = dev(
        "gpu-1",
        consumesCounters=[{"counterSet": "gpu-1-mem", "counters": {"memory": {"value": "8"}}}],
    )
    slices = [
        slice_(counters=sets, name="s0", count=2),
        slice_([part("whole", "8"), part("half-a", "4"), other], name="s1", count=2),
    ]
    ok = run(slices, claim(req(count=1)), allocated=(allocated_claim(held("whole")),))
    assert ok == [["r=gpu-1"]]
    # "whole" and "half-a" were allocated together (the driver republished): gpu-0-mem is 4 over
    over = allocated_claim(held("whole"), held("half-a"))
    assert run(slices, claim(req(count=1)), allocated=(over,)) is None


def test_pools_sorted_by_driver_then_name_and_slices_by_name() -> None:
    slices = [
        slice_([dev("z")], name="b-slice", pool="pool-b"),
        slice_([dev("y")], name="a-slice-2", pool="pool-a", count=2),
        slice_([dev("x")], name="a-slice-1", pool="pool-a", count=2),
    ]
    assert run(slices, claim(req(count=3))) == [["r=x", "r=y", "r=z"]]


def test_incomplete_and_old_generation_pools() -> None:
    incomplete = [slice_([dev("a")], count=2)]
    assert run(incomplete, claim(req())) is None
    stale = [
        slice_([dev("old")], generation=1, name="s0"),
        slice_([dev("new")], generation=2, name="s1"),
    ]
    assert run(stale, claim(req())) == [["r=new"]]


def test_slices_for_other_nodes_are_ignored() -> None:
    assert run([slice_([dev("a")], node="elsewhere", pool="elsewhere")], claim(req())) is None


def test_several_claims_of_one_pod_share_nothing() -> None:
    assert run([slice_(FOUR[:3])], claim(req(count=2)), claim(req(count=1))) == [
        ["r=gpu-0", "r=gpu-1"],
        ["r=gpu-2"],
    ]
    assert run([slice_(FOUR[:3])], claim(req(count=2)), claim(req(count=2))) is None


def test_config_from_class_and_claim() -> None:
    cls = classes()
    cls["gpu"] = DeviceClass.model_validate(
        {
            "metadata": {"name": "gpu"},
            "spec": {"config": [{"opaque": {"driver": GPU, "parameters": {"a": 1}}}]},
        }
    )
    c = claim(
        req("r"),
        req("s"),
        config=[{"requests": ["s"], "opaque": {"driver": GPU, "parameters": {"b": 2}}}],
    )
    out = Allocator(Node.named(NODE), [slice_(FOUR)], cls).allocate([c])
    assert out is not None
    config = list(out[0].devices.config)
    assert config[0] == {"source": "FromClass", "opaque": {"driver": GPU, "parameters": {"a": 1}}}
    assert config[1]["source"] == "FromClaim"
    assert config[1]["requests"] == ["s"]


def test_result_limit_of_32() -> None:
    many = [dev(f"d-{i}") for i in range(40)]
    with pytest.raises(AllocationError, match="claim limit of 32"):
        run([slice_(many)], claim(req(count=33)))


def test_claim_spec_is_strict_and_names_the_field() -> None:
    with pytest.raises(ValidationError, match="deviceClasName"):
        claim({"name": "r", "exactly": {"deviceClasName": "gpu"}})


def test_cel_bind_is_reported_as_unsupported() -> None:
    c = claim(req(selectors=sel("cel.bind(x, device.driver, x == 'a')")))
    with pytest.raises(AllocationError, match=r"cel\.bind\(\) is not supported"):
        run([slice_(FOUR)], c)


def test_list_attributes_match_by_intersection() -> None:
    devices = [
        dev("a", {"numa": {"ints": [0, 1]}}),
        dev("b", {"numa": {"ints": [2]}}),
        dev("c", {"numa": {"ints": [1, 2]}}),
    ]
    c = claim(req(count=2), constraints=[{"matchAttribute": f"{GPU}/numa"}])
    assert run([slice_(devices)], c) == [["r=a", "r=c"]]


def test_driver_only_selector_shortcut_agrees_with_cel() -> None:
    from drakit.allocator.api import Device
    from drakit.allocator.cel import DeviceEnv, Selector

    fast = Selector(f'device.driver == "{GPU}"')
    slow = Selector(f'device.driver == "{GPU}" && true')
    assert fast.driver_only == GPU
    assert slow.driver_only is None
    for driver in (GPU, "other.example.com"):
        env = DeviceEnv.of(driver, Device(name="d"))
        assert slow.matches(env) is (driver == fast.driver_only)
