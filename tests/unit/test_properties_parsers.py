"""Property tests (hypothesis, bounded) over every parser of outside input (issue 30, item 6).

The invariant, per parser: whatever the input, the answer is a value or drakit's own error that
names the field (or the input) at fault; never another exception, never unbounded work. Inputs
are drawn so that unbounded work would show (huge exponents and digit strings, deep nesting,
non-ASCII digits); examples are few per test (``FAST``) to keep CI's cost small.

* configuration files (``load_settings``): ``ConfigInvalid``, each error with its path;
* opaque configurations of every backend (``drakit_parse_config`` through the plugin host, as
  the webhook and the node call it): ``ConfigInvalid`` naming ``apiVersion``/``kind`` or a field;
* claims as the node reads them (``ClaimReader.fetch``): a plan or a ``ClaimError`` naming the
  claim, never the catch-all "malformed claim";
* the pair pods' annotations (``plan_pod``): ``ConfigInvalid`` naming the annotation;
* the AINIC rail and fabric Node labels (``label_identity``): never an error, rails only
  whole numbers in range;
* quantities (``quantity_value``, ``whole_quantity``): a value, ``None`` or a
  ``PermanentError`` naming where;
* CEL selectors (``compile_selector`` on a published device): a bool or a ``CelError``.
"""

from __future__ import annotations

# ruff: noqa: PT017 - the invariant is checked on whichever answer a generated input gets
import os
import tempfile
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from drakit.allocator.api import Device as ApiDevice
from drakit.allocator.cel import CelError, DeviceEnv, compile_selector
from drakit.errors import ConfigInvalid, PermanentError
from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings, load_settings
from drakit.host.startup import open_host
from drakit.models import ClaimRef, quantity_value
from drakit.prepare.claims import ClaimError, ClaimReader
from drakit.preparekit import whole_quantity
from drakit_amd_ainic.devices import label_identity
from drakit_amd_ainic.settings import AmdAinicSettings
from drakit_composite.admission import AdmissionSettings, plan_pod

pytestmark = pytest.mark.usefixtures("clean_drakit_env")

FAST = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["yes", "1e999999", "9" * 5000, "\u0663", "²", "-1", "0x10", "1Gi"])
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)


def deep(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = {"x": [value]}
    return value


# -- configuration -----------------------------------------------------------------------------

TOP = sorted(DrakitSettings.model_fields)


@FAST
@given(st.dictionaries(st.sampled_from([*TOP, "typo"]), JSON, max_size=4))
def test_a_config_file_is_loaded_or_refused_naming_each_field(data: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "drakit.yaml"
        path.write_text(yaml.safe_dump(data))
        before = dict(os.environ)
        try:
            load_settings(path)
        except ConfigInvalid as e:
            assert e.errors
            for where, message in e.errors:
                assert message
                assert where or str(path) in str(e) or "mapping" in message, (where, message)
        assert dict(os.environ) == before  # nothing else affected


# -- opaque configurations ---------------------------------------------------------------------

KINDS = [
    ("cpu.drakit.io", "cpu.drakit.io/v1alpha1", "CpuConfig"),
    ("gpu.nvidia.drakit.io", "gpu.nvidia.drakit.io/v1alpha1", "GpuConfig"),
    ("ainic.amd.drakit.io", "ainic.drakit.io/v1alpha1", "NicConfig"),
]


@pytest.fixture(scope="module")
def host() -> Iterator[PluginHost]:
    with open_host(
        DrakitSettings(
            profile="h200-8gpu-8ainic", plugins={"cpu": {}, "nvidia_gpu": {}, "amd_ainic": {}}
        )
    ) as h:
        yield h


@FAST
@given(
    st.sampled_from(KINDS),
    st.dictionaries(st.text(max_size=12), JSON, max_size=4),
    st.booleans(),
    st.integers(min_value=0, max_value=200),
)
def test_an_opaque_config_is_parsed_or_refused_naming_the_field(
    host: PluginHost,
    kind: tuple[str, str, str],
    fields: dict[str, Any],
    own_kind: bool,
    depth: int,
) -> None:
    driver, api_version, name = kind
    drivers = set(host.driver_names().values())
    driver = next((d for d in drivers if d.startswith(driver.split(".", 1)[0])), driver)
    params: dict[str, Any] = dict(fields)
    if own_kind:
        params.update(apiVersion=api_version, kind=name)
    if depth:
        params["nested"] = deep({}, depth)
    try:
        parsed = host.parse_config(driver, params)
    except ConfigInvalid as e:
        assert e.errors
        for where, message in e.errors:
            assert message, where
            assert where, message  # the field (or apiVersion/kind) is named
    else:
        assert isinstance(parsed, BaseModel)


# -- claims as the node reads them -------------------------------------------------------------


class _Claims:
    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def get_resource_claim(self, namespace: str, name: str) -> Any:
        return self.obj


@pytest.fixture(scope="module")
def cpu_node() -> Iterator[tuple[PluginHost, Any, str]]:
    with open_host(DrakitSettings(profile="h200-8gpu-8ainic", plugins={"cpu": {}})) as h:
        snap = build_inventory(h)
        yield h, snap, h.driver_names()["cpu"]


RESULT_FIELDS = [
    "request",
    "driver",
    "pool",
    "device",
    "shareID",
    "consumedCapacity",
    "adminAccess",
]


@FAST
@given(
    st.dictionaries(st.sampled_from(RESULT_FIELDS), JSON, max_size=3),
    st.lists(JSON, max_size=2),
    st.integers(min_value=0, max_value=300),
)
def test_a_claim_is_planned_or_refused_naming_it(
    cpu_node: tuple[PluginHost, Any, str], changes: dict[str, Any], configs: list[Any], depth: int
) -> None:
    host, snap, driver = cpu_node
    result: dict[str, Any] = {
        "request": "cpus",
        "driver": driver,
        "pool": host.node.name,
        "device": next(d.name for k, _, d in snap.devices() if k.driver == driver),
        **changes,
    }
    config = [*configs, {"opaque": {"driver": driver, "parameters": deep({}, depth)}}]
    obj = {
        "metadata": {"namespace": "ns", "name": "c", "uid": "u-1"},
        "status": {"allocation": {"devices": {"results": [result], "config": config}}},
    }
    ref = ClaimRef(namespace="ns", name="c", uid="u-1")
    got = ClaimReader(driver, host, _Claims(obj)).fetch(ref, snap)
    if isinstance(got, ClaimError):
        text = str(got)
        assert text.startswith("claim ns/c"), text
        assert "malformed claim" not in text, text  # an error that names no field


# -- annotations, labels -----------------------------------------------------------------------

ANNOTATION = st.text(max_size=8) | st.sampled_from(["4", "0", "129", "²", "\u0663", "9" * 5000])


@FAST
@given(ANNOTATION, st.sampled_from(["none", "preferred", "required", "strict", ""]))
def test_pair_annotations_are_planned_or_refused_naming_the_annotation(
    host: PluginHost, pairs: str, policy: str
) -> None:
    from drakit_composite.admission import PAIRS_ANNOTATION, POLICY_ANNOTATION

    pod = {
        "metadata": {"annotations": {PAIRS_ANNOTATION: pairs, POLICY_ANNOTATION: policy}},
        "spec": {"containers": [{"name": "c"}]},
    }
    try:
        plan = plan_pod(host, AdmissionSettings(), pod)
    except ConfigInvalid as e:
        [(where, message)] = e.errors
        assert where.startswith("metadata.annotations[composite.drakit.io/"), where
        assert len(message) < 300
    else:
        assert plan is not None
        assert 1 <= int(pairs) <= 128


@FAST
@given(st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=6))
def test_rail_labels_never_stop_discovery(labels: dict[str, str]) -> None:
    prefixed = {f"ainic.drakit.io/{k}": v for k, v in labels.items()}
    rails, _, _ = label_identity(AmdAinicSettings(), {**labels, **prefixed})
    for rail in rails.values():
        assert 0 <= rail < 10**9


# -- quantities and CEL --------------------------------------------------------------------------

QUANTITY = st.from_regex(
    r"\A[+-]?([0-9]{1,30}(\.[0-9]{0,5})?|\.[0-9]{1,5})([eE][+-]?[0-9]{1,9}|Ki|Mi|Gi|m|k|M|E)?\Z"
) | st.sampled_from(["1e999999999", "9" * 5000, "1" + "0" * 4400, ".5e-99999"])


@FAST
@given(QUANTITY | st.text(max_size=20))
def test_a_quantity_is_read_exactly_or_refused(text: str) -> None:
    value = quantity_value(text)
    assert value is None or isinstance(value, Fraction)
    try:
        n = whole_quantity(text, "claim ns/c", "cpu", most=10**6, holder="a node")
    except PermanentError as e:
        assert str(e).startswith("claim ns/c: consumed cpu "), e
    else:
        assert 0 < n <= 10**6


ATTRIBUTE = st.sampled_from(
    ['device.attributes["resource.kubernetes.io"].numaNode', 'device.attributes["x.io"].y']
)
LITERAL = (
    st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | QUANTITY.map(lambda q: f'quantity("{q}")')
    | st.text(alphabet="abc\"\\' ", max_size=6).map(lambda t: f'"{t}"')
)
EXPRESSION = st.builds(
    lambda a, op, lit: f"{a} {op} {lit}",
    ATTRIBUTE | st.just('device.capacity["cpu.drakit.io"].cpu'),
    st.sampled_from(["==", "<", ">=", "!=", "in"]),
    LITERAL,
) | st.text(max_size=20)


@FAST
@given(EXPRESSION)
def test_a_selector_answers_a_bool_or_a_cel_error(
    cpu_node: tuple[PluginHost, Any, str], expression: str
) -> None:
    _, snap, driver = cpu_node
    [published] = [s for s in snap.slices() if s["spec"]["driver"] == driver]
    device = ApiDevice.model_validate(published["spec"]["devices"][0])  # as the allocator reads it
    try:
        got = compile_selector(expression).matches(DeviceEnv.of(driver, device))
    except CelError as e:
        assert "selector" in str(e)
    else:
        assert isinstance(got, bool)
