"""Property tests (hypothesis, bounded) over configurations, CPU lists, opaque configs and slices.

Each property is what a user or the API server relies on, whatever the input: a bad file is a
``ConfigInvalid`` whose lines name a field, never another exception; a CPU list parses into ids
below ``MAX_CPUS`` or fails with ``CpuListError``; an opaque config is a model or a
``ConfigInvalid``; a pool splits into devices the API server accepts (within every slice limit,
names in publishing order) and one error per device left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drakit.cpuset import MAX_CPUS, CpuListError, format_cpulist, parse_cpulist
from drakit.errors import ConfigInvalid, SliceValidationError
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings, load_settings
from drakit.models import Device, DeviceAttribute, DeviceTaint, NodeInfo
from drakit.publish.render import (
    MAX_DEVICES,
    MAX_DEVICES_ADVANCED,
    PoolSpec,
    check_pool,
    render_checked,
    validate_device,
)

pytestmark = pytest.mark.usefixtures("clean_drakit_env")

BOUNDED = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = ["node_name", "health", "discovery", "metrics", "plugins", "publish_strategy", "state_dir"]
SUBKEYS = ["interval", "resend", "port", "address", "cpu", "reserved", "driver", "strategy"]


def config_docs() -> st.SearchStrategy[dict[str, Any]]:
    section = st.dictionaries(st.sampled_from(SUBKEYS), json_values, max_size=3)
    return st.dictionaries(st.sampled_from(KEYS), st.one_of(json_values, section), max_size=4)


@BOUNDED
@given(doc=config_docs())
def test_any_configuration_loads_or_fails_with_one_line_per_field(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    path = tmp_path / "drakit.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    try:
        s = load_settings(path)
    except ConfigInvalid as e:
        lines = e.lines()
    else:
        lines = []
    if lines:
        assert all("\n" not in line for line in lines)
        return
    assert 1 <= s.health.interval <= 3600
    assert 1 <= s.discovery.interval <= 86400


@BOUNDED
@given(text=st.text(alphabet="0123456789-, x\u00b2\n", max_size=30))
def test_any_text_is_a_bounded_cpu_list_or_a_cpu_list_error(text: str) -> None:
    try:
        cpus = parse_cpulist(text)
    except CpuListError as e:
        message = str(e)
    else:
        message = ""
    if message:
        assert "\n" not in message
        return
    assert all(0 <= c < MAX_CPUS for c in cpus)


@BOUNDED
@given(cpus=st.frozensets(st.integers(min_value=0, max_value=MAX_CPUS - 1), max_size=200))
def test_cpu_lists_round_trip(cpus: frozenset[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@pytest.fixture(scope="module")
def cpu_host() -> PluginHost:
    return PluginHost(DrakitSettings(plugins={"cpu": {}}), NodeInfo(name="n1", sysfs_root="/"))


OPAQUE_KEYS = ["apiVersion", "kind", "policy", "groupSize", "preferUncore", "fullPCPUsOnly", "x"]


@BOUNDED
@given(
    params=st.dictionaries(st.sampled_from(OPAQUE_KEYS), json_values, max_size=5),
    api=st.sampled_from(["cpu.drakit.io/v1alpha1", "cpu.drakit.io/v2", ""]),
    kind=st.sampled_from(["CpuConfig", "Other"]),
)
def test_any_opaque_config_is_a_model_or_config_invalid(
    cpu_host: PluginHost, params: dict[str, Any], api: str, kind: str
) -> None:
    parameters = {"apiVersion": api, "kind": kind, **params} if params.get("x") else params
    driver = cpu_host.driver_names()["cpu"]
    errors: list[tuple[str, str]] = []
    try:
        cpu_host.parse_config(driver, parameters)
    except ConfigInvalid as e:
        errors = e.errors
        assert errors, "a ConfigInvalid names at least one field"


NAMES = st.one_of(st.from_regex(r"\Agpu-[0-9]{1,3}\Z"), st.text(max_size=70))
ATTR_NAMES = st.one_of(
    st.sampled_from(["index", "x.io/model", "bad name", "a" * 33]), st.text(max_size=8)
)
ATTR_VALUES = st.one_of(
    st.builds(lambda v: DeviceAttribute.model_construct(int_=v), st.integers(-(2**64), 2**64)),
    st.builds(lambda v: DeviceAttribute.model_construct(string=v), st.text(max_size=70)),
    st.builds(
        lambda v: DeviceAttribute.model_construct(version=v),
        st.sampled_from(["1.2.3", "2.4", "1.0.0-rc.1", "v1"]),
    ),
    st.builds(
        lambda v: DeviceAttribute.model_construct(ints=tuple(v)),
        st.lists(st.integers(-10, 10), max_size=3),
    ),
)
TAINTS = st.builds(
    lambda k, v: DeviceTaint.model_construct(key=k, value=v, effect="NoSchedule"),
    st.one_of(st.sampled_from(["ok", "example.com/bad", "bad key"]), st.text(max_size=70)),
    st.one_of(st.just(""), st.text(max_size=70)),
)
DEVICES = st.builds(
    lambda name, attrs, taints: Device.model_construct(
        name=name,
        attributes=attrs,
        capacity={},
        consumes_counters=(),
        taints=tuple(taints),
        allow_multiple_allocations=None,
        pool=None,
    ),
    NAMES,
    st.dictionaries(ATTR_NAMES, ATTR_VALUES, max_size=4),
    st.lists(TAINTS, max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(
    devices=st.lists(DEVICES, max_size=20),
    padding=st.integers(min_value=0, max_value=300),
)
def test_a_pool_splits_into_publishable_devices_and_one_error_per_device_left_out(
    devices: list[Device], padding: int
) -> None:
    plain = [Device(name=f"pad-{i}") for i in range(padding)]
    spec = PoolSpec(driver="gpu.example.com", node="n1", pool="n1", devices=(*devices, *plain))
    kept, errors = check_pool(spec)
    assert len(kept.devices) + len(errors) == len(spec.devices)
    assert all(isinstance(e, SliceValidationError) for e in errors)
    assert all(str(e).startswith("device gpu.example.com/n1/") for e in errors)
    assert len({d.name for d in kept.devices}) == len(kept.devices)
    for d in kept.devices:
        validate_device(d, d.name, set())
        try:  # what is kept is also what the model accepts, once re-validated
            Device.model_validate(d.model_dump(by_alias=True))
        except ValidationError as e:
            pytest.fail(f"kept a device the model refuses: {e}")
    slices = render_checked(kept)
    names = [s["metadata"]["name"] for s in slices]
    assert sorted(names) == names
    for s in slices:
        devs = s["spec"]["devices"]
        advanced = any(
            "taints" in d or any("ints" in a for a in d.get("attributes", {}).values())
            for d in devs
        )
        assert len(devs) <= (MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES)
        assert s["spec"]["pool"]["resourceSliceCount"] == len(slices)
    assert render_checked(kept) == slices  # deterministic
