"""drakit.explain.report: the reasons it gives, one kind per test (the doc examples cover the
rest).
"""

from __future__ import annotations

import time
from typing import Any

from click.testing import CliRunner
from tests.unit.test_allocator import (
    COUNTERS,
    FOUR,
    GPU,
    NODE,
    allocated_claim,
    claim,
    classes,
    dev,
    first_available,
    held,
    part,
    req,
    sel,
    slice_,
)

from drakit.allocator import Node, ResourceSlice
from drakit.allocator.api import DeviceTaintRule, apply_taint_rules
from drakit.commands.cli import cli
from drakit.explain.report import NodeExplanation, explain


def one(slices: list[ResourceSlice], c: Any, **kw: Any) -> NodeExplanation:
    [n] = explain(c, slices, classes(), **kw).nodes
    return n


def messages(n: NodeExplanation) -> str:
    return "\n".join(f"{r.request}: {r.kind}: {r.message}" for r in n.reasons)


def test_fits_with_the_allocation() -> None:
    n = one([slice_(FOUR)], claim(req(count=2)))
    assert n.fits
    assert [r["device"] for r in n.allocation] == ["gpu-0", "gpu-1"]
    assert n.reasons == []


def test_selector_is_quoted_with_the_devices_it_excluded() -> None:
    expr = f'device.attributes["{GPU}"].model == "h200"'
    n = one([slice_(FOUR)], claim(req(count=3, selectors=sel(expr))))
    text = messages(n)
    assert not n.fits
    assert "r: count: needs 3 devices, 2 eligible on this node" in text
    assert f"gpu-0, gpu-2: selector `{expr}` is false" in text


def test_in_use_names_the_claim() -> None:
    n = one([slice_(FOUR[:1])], claim(req()), allocated=[allocated_claim(held("gpu-0"))])
    assert "gpu-0: in use by ns/old" in messages(n)


def test_shared_counter_says_what_is_left() -> None:
    slices = [
        slice_(counters=COUNTERS, name="s0", count=2),
        slice_([part("whole", "8"), part("half-a", "4")], name="s1", count=2),
    ]
    n = one(
        slices,
        claim(req(selectors=sel(f'device.attributes["{GPU}"].x == 1 || true'))),
        allocated=[allocated_claim(held("half-a"))],
    )
    text = messages(n)
    assert "whole: shared counter gpu-0-mem/memory: needs 8, 4 left" in text
    assert "half-a: in use by ns/old" in text


def test_first_available_reports_every_alternative() -> None:
    c = claim(first_available("p", big=8, small=5))
    text = messages(one([slice_(FOUR)], c))
    assert "none of the 2 firstAvailable alternatives can be met" in text
    assert "p/big: count: needs 8 devices, 4 eligible" in text
    assert "p/small: count: needs 5 devices, 4 eligible" in text


def test_distinct_constraint() -> None:
    c = claim(req(count=3), constraints=[{"distinctAttribute": f"{GPU}/numa"}])
    text = messages(one([slice_(FOUR)], c))
    assert "distinctAttribute gpu.example.com/numa" in text
    assert "3 devices with different numa values needed, 2 values" in text
    assert "the preferred policy would fit" in text


def test_requests_competing_for_devices() -> None:
    c = claim(req("a", count=3), req("b", count=2))
    text = messages(one([slice_(FOUR)], c))
    assert "each request can be met alone, but not all together" in text


def test_cel_error_is_reported() -> None:
    c = claim(req(selectors=sel(f'device.attributes["{GPU}"].nosuch == 1')))
    n = one([slice_(FOUR)], c)
    assert n.reasons[0].kind == "error"
    assert "nosuch" in n.reasons[0].message


def test_incomplete_pool() -> None:
    text = messages(one([slice_(FOUR, count=2)], claim(req())))
    assert "pool gpu.example.com/n1 is incomplete" in text


def test_every_node_with_slices_and_the_node_filter() -> None:
    slices = [slice_(FOUR), slice_([dev("x")], node="n2", pool="n2")]
    ex = explain(claim(req(count=2)), slices, classes())
    assert [(n.node, n.fits) for n in ex.nodes] == [(NODE, True), ("n2", False)]
    only = explain(claim(req(count=2)), slices, classes(), nodes=[Node.named("n2")])
    assert [n.node for n in only.nodes] == ["n2"]


def test_cli_errors_name_the_field(tmp_path: Any) -> None:
    bad = tmp_path / "claim.yaml"
    bad.write_text(
        "metadata: {name: c}\nspec:\n  devices:\n    requests:\n"
        "    - name: r\n      exactly: {deviceClasName: gpu}\n"
    )
    slices = tmp_path / "s.yaml"
    slices.write_text("kind: List\nitems: []\n")
    result = CliRunner().invoke(cli, ["explain", "--slices", str(slices), "--claim", str(bad)])
    assert result.exit_code != 0
    assert "deviceClasName" in str(result.exception) + result.output


def test_taint_rules_taint_the_devices_they_select() -> None:
    """A DeviceTaintRule's taint counts as the driver's; a missing selector selects nothing."""
    slice_ = ResourceSlice.model_validate(
        {
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "n1"},
                "nodeName": "n1",
                "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
            }
        }
    )

    def rule(name: str, selector: dict[str, str] | None) -> DeviceTaintRule:
        spec: dict[str, object] = {"taint": {"key": "k", "value": name, "effect": "NoSchedule"}}
        if selector is not None:
            spec["deviceSelector"] = selector
        return DeviceTaintRule.model_validate({"metadata": {"name": name}, "spec": spec})

    rules = [
        rule("one", {"driver": "gpu.example.com", "device": "gpu-1"}),
        rule("all", {}),
        rule("none", None),
        rule("other-pool", {"pool": "n2"}),
    ]
    [out] = apply_taint_rules([slice_], rules)
    got = {d.name: [t.show() for t in d.taints] for d in out.spec.devices}
    assert got == {
        "gpu-0": ["k=all:NoSchedule (DeviceTaintRule all)"],
        "gpu-1": [
            "k=one:NoSchedule (DeviceTaintRule one)",
            "k=all:NoSchedule (DeviceTaintRule all)",
        ],
    }
    assert slice_.spec.devices[0].taints == ()  # the input is left alone


def test_an_impossible_constraint_over_many_devices_is_cut_off_in_steps() -> None:
    """Issue 30, class 6: explain answers "search cut off after N steps", not minutes later."""
    devs = [dev(f"gpu-{i}", {"numa": i // 4}) for i in range(64)]
    c = claim(req(count=17), constraints=[{"distinctAttribute": f"{GPU}/numa"}])
    start = time.monotonic()
    n = one([slice_(devs)], c)
    assert time.monotonic() - start < 20
    assert not n.fits
    assert "search cut off after 50000 steps" in messages(n)
