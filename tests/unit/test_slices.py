"""ResourceSlice rendering: the API server's limits and name rules, checked before sending.

Limits are the ``resource.k8s.io/v1`` validation constants (dra-reference sections 4.1-4.3):
128 devices per slice, 64 with taints, ``consumesCounters`` or list attributes; counter sets
in slices of their own, 8 per slice; 32 attributes + capacities per device; DNS names.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from drakit.errors import SliceValidationError
from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import (
    CounterConsumption,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceTaint,
    RequestPolicy,
    ValidRange,
    attribute,
)
from drakit.publish.render import (
    API_VERSION,
    PoolSpec,
    check_pool,
    render_pool,
    render_slices,
    slice_name,
)
from drakit.sim import list_profiles, profile_info

pytestmark = pytest.mark.usefixtures("clean_drakit_env")

DRIVER = "gpu.example.com"
NODE = "node-1"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def plain(n: int, prefix: str = "dev") -> list[Device]:
    return [Device(name=f"{prefix}-{i}", attributes={"index": i}) for i in range(n)]


def render(
    devices: list[Device], counter_sets: tuple[CounterSet, ...] = ()
) -> list[dict[str, Any]]:
    return render_pool(
        PoolSpec(
            driver=DRIVER, node=NODE, pool=NODE, devices=tuple(devices), counter_sets=counter_sets
        )
    )


def sizes(slices: list[dict[str, Any]], field: str = "devices") -> list[int]:
    return [len(s["spec"][field]) for s in slices if field in s["spec"]]


def rejects(
    devices: list[Device], *fragments: str, counter_sets: tuple[CounterSet, ...] = ()
) -> str:
    with pytest.raises(SliceValidationError) as exc:
        render(devices, counter_sets)
    text = str(exc.value)
    for fragment in fragments:
        assert fragment in text, text
    return text


# -- splitting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, [1]), (128, [128]), (129, [128, 1]), (300, [128, 128, 44])],
)
def test_plain_devices_split_at_128(count: int, expected: list[int]) -> None:
    assert sizes(render(plain(count))) == expected


ADVANCED: dict[str, Device] = {
    "taints": Device(name="x", taints=(DeviceTaint(key="example.com/unhealthy"),)),
    "consumesCounters": Device(
        name="x", consumes_counters=(CounterConsumption(counter_set="mem", counters={"gib": "1"}),)
    ),
    "list attribute": Device(name="x", attributes={"links": DeviceAttribute(ints=(1, 2))}),
}
MEM = (CounterSet(name="mem", counters={"gib": "1000"}),)


@pytest.mark.parametrize("feature", sorted(ADVANCED))
def test_advanced_devices_split_at_64(feature: str) -> None:
    devices = [ADVANCED[feature].model_copy(update={"name": f"adv-{i}"}) for i in range(130)]
    assert sizes(render(devices, MEM)) == [64, 64, 2]


@pytest.mark.parametrize("feature", sorted(ADVANCED))
def test_one_advanced_device_limits_its_chunk_to_64(feature: str) -> None:
    devices = plain(100)
    devices.insert(50, ADVANCED[feature].model_copy(update={"name": "adv"}))
    slices = render(devices, MEM)
    assert sizes(slices) == [64, 37]
    for s in slices:
        assert len(s["spec"].get("devices", [])) <= 64


def test_plain_devices_before_an_advanced_one_keep_their_own_slice() -> None:
    devices = [*plain(100), ADVANCED["taints"].model_copy(update={"name": "adv"})]
    assert sizes(render(devices)) == [100, 1]


def test_counter_sets_get_slices_of_their_own_at_most_8_each() -> None:
    sets = tuple(
        CounterSet(name=f"gpu-{i}-counters", counters={"memory": "80Gi"}) for i in range(10)
    )
    devices = [
        Device(
            name=f"gpu-{i}-part",
            consumes_counters=(
                CounterConsumption(counter_set=f"gpu-{i}-counters", counters={"memory": "10Gi"}),
            ),
        )
        for i in range(10)
    ]
    slices = render(devices, sets)
    assert sizes(slices, "sharedCounters") == [8, 2]
    assert sizes(slices, "devices") == [10]
    for s in slices:
        assert ("devices" in s["spec"]) != ("sharedCounters" in s["spec"])  # 1.35+: exclusive
    first = slices[0]["spec"]["sharedCounters"][0]
    assert first == {"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}


def test_pool_metadata() -> None:
    slices = render(plain(200))
    assert [s["metadata"]["name"] for s in slices] == [
        "node-1-gpu.example.com-a0",
        "node-1-gpu.example.com-a1",
    ]
    for s in slices:
        assert s["apiVersion"] == API_VERSION == "resource.k8s.io/v1"
        assert s["kind"] == "ResourceSlice"
        assert s["spec"]["driver"] == DRIVER
        assert s["spec"]["nodeName"] == NODE
        assert s["spec"]["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 2}


def test_generation_is_stamped_on_every_slice() -> None:
    spec = PoolSpec(driver=DRIVER, node=NODE, pool=NODE, devices=tuple(plain(3)))
    assert {s["spec"]["pool"]["generation"] for s in render_pool(spec, generation=7)} == {7}


def test_empty_pool_is_published_as_one_empty_slice() -> None:
    [s] = render([])
    assert s["spec"]["devices"] == []
    assert s["spec"]["pool"]["resourceSliceCount"] == 1


def test_devices_with_a_pool_go_to_their_own_pool_counter_sets_to_the_nodes() -> None:
    devices = [*plain(2), Device(name="remote-0", pool="rack-7")]
    slices = render_slices(DRIVER, NODE, devices, MEM)
    pools = Counter(s["spec"]["pool"]["name"] for s in slices)
    assert pools == {NODE: 2, "rack-7": 1}
    [remote] = [s for s in slices if s["spec"]["pool"]["name"] == "rack-7"]
    assert remote["metadata"]["name"] == "node-1-gpu.example.com-rack-7-a0"
    assert "sharedCounters" not in remote["spec"]


def test_device_body_is_the_v1_shape() -> None:
    dev = Device(
        name="gpu-0",
        attributes={
            "index": 0,
            "mig": True,
            "model": "H200",
            "driverVersion": DeviceAttribute(version="550.54.15"),
            "resource.kubernetes.io/pcieRoot": "pci0000:15",
        },
        capacity={
            "memory": DeviceCapacity(value="141Gi"),
            "cores": DeviceCapacity(
                value="132",
                request_policy=RequestPolicy(
                    default="1", valid_range=ValidRange(min="1", step="1")
                ),
            ),
        },
        allow_multiple_allocations=True,
        taints=(DeviceTaint(key="example.com/ecc", value="high", effect="NoExecute"),),
    )
    [s] = render([dev])
    assert s["spec"]["devices"] == [
        {
            "name": "gpu-0",
            "attributes": {
                "driverVersion": {"version": "550.54.15"},
                "index": {"int": 0},
                "mig": {"bool": True},
                "model": {"string": "H200"},
                "resource.kubernetes.io/pcieRoot": {"string": "pci0000:15"},
            },
            "capacity": {
                "cores": {
                    "value": "132",
                    "requestPolicy": {"default": "1", "validRange": {"min": "1", "step": "1"}},
                },
                "memory": {"value": "141Gi"},
            },
            "taints": [{"key": "example.com/ecc", "value": "high", "effect": "NoExecute"}],
            "allowMultipleAllocations": True,
        }
    ]


# -- rules -------------------------------------------------------------------------------------


def test_32_attributes_and_capacities_are_accepted() -> None:
    attrs = {f"a{i}": i for i in range(30)}
    render([Device(name="full", attributes=attrs, capacity={"c0": "1", "c1": "2"})])


def test_more_than_32_attributes_and_capacities_are_rejected() -> None:
    attrs = {f"a{i}": i for i in range(30)}
    dev = Device(name="crowded", attributes=attrs, capacity={"c0": "1", "c1": "2", "c2": "3"})
    rejects([dev], "gpu.example.com/node-1/crowded", "33 attributes + capacities", "at most 32")


def test_more_than_48_attribute_values_are_rejected() -> None:
    dev = Device(
        name="lists",
        attributes={
            "a": DeviceAttribute(ints=tuple(range(40))),
            "b": DeviceAttribute(strings=("x",) * 9),
        },
    )
    rejects([dev], "lists", "49 attribute values", "48")


@pytest.mark.parametrize("name", ["GPU-0", "gpu_0", "-gpu", "gpu-", "g" * 64, "gpu.0"])
def test_device_name_must_be_a_dns_label(name: str) -> None:
    rejects([Device(name=name)], "device name", "must be a DNS label")


@pytest.mark.parametrize(
    ("attribute", "fragment"),
    [
        ("a" * 33, "C identifier of at most 32"),
        ("1st", "C identifier"),
        ("has-dash", "C identifier"),
        ("Bad_Domain/model", "name 'Bad_Domain/model': the domain must be a DNS subdomain"),
        (("d" * 64) + "/model", "at most 63"),
    ],
)
def test_attribute_names(attribute: str, fragment: str) -> None:
    rejects([Device(name="gpu-0", attributes={attribute: 1})], "gpu-0", fragment)


def test_capacity_names_follow_the_same_rule() -> None:
    rejects([Device(name="gpu-0", capacity={"memory-bytes": "1"})], "capacity", "C identifier")


def test_attribute_names_at_the_limits_are_accepted() -> None:
    render([Device(name="g" * 63, attributes={"a" * 32: 1, ("d" * 63) + "/" + ("b" * 32): 2})])


def test_driver_name_too_long() -> None:
    driver = ("a" * 60) + ".com"  # 64 characters
    with pytest.raises(SliceValidationError, match="at most 63 characters"):
        render_slices(driver, NODE, plain(1))
    render_slices(driver[1:], NODE, plain(1))  # 63 is fine


def test_driver_name_must_be_a_dns_subdomain() -> None:
    with pytest.raises(SliceValidationError, match="DNS subdomain"):
        render_slices("gpu_example.com", NODE, plain(1))


def unchecked(name: str, field: str, attribute: str, value: Any) -> Device:
    """A device whose attribute skipped the model's checks (a plugin using model_construct)."""
    return Device.model_construct(
        name=name, attributes={attribute: DeviceAttribute.model_construct(**{field: value})}
    )


def refused_everywhere(field: str, value: Any, *fragments: str) -> None:
    """The model refuses the value naming device and attribute; the renderer refuses it too."""
    with pytest.raises(ValidationError) as exc:
        Device(name="gpu-0", attributes={"fw": DeviceAttribute.model_validate({field: value})})
    with pytest.raises(ValidationError) as named:
        Device.model_validate({"name": "gpu-0", "attributes": {"fw": {field: value}}})
    assert "device 'gpu-0': attributes.fw:" in str(named.value)
    for fragment in fragments:
        assert fragment in str(exc.value)
        assert fragment in str(named.value)
    internal = "int_" if field == "int" else field
    rejects([unchecked("gpu-0", internal, "fw", value)], "attribute fw", *fragments)


def test_string_attribute_over_64_bytes() -> None:
    refused_everywhere("string", "x" * 65, "65 bytes")
    render([Device(name="gpu-0", attributes={"serial": "x" * 64})])


def test_string_length_is_counted_in_utf8_bytes() -> None:
    refused_everywhere("string", "é" * 33, "66 bytes in UTF-8")  # 33 characters
    render([Device(name="gpu-0", attributes={"serial": "é" * 32})])  # 64 bytes


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("x" * 65, "65 bytes"), ("é" * 33, "66 bytes in UTF-8"), (2**63, "outside the int64 range")],
)
def test_plain_values_are_checked_like_typed_ones(value: object, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        DeviceAttribute.model_validate(value)
    with pytest.raises(ValidationError, match=fragment):
        attribute(value)  # type: ignore[arg-type]  # the fast form checks the same
    with pytest.raises(ValidationError) as exc:
        Device(name="gpu-0", attributes={"fw": value})
    assert fragment in str(exc.value)
    assert DeviceAttribute.model_validate("é" * 32).value == "é" * 32  # 64 bytes


@pytest.mark.parametrize(
    "value",
    ["mlx5_3", "", 7, -(2**63), True, False, {"version": "1.2.3"}, {"ints": [1, 2]}],
    ids=repr,
)
def test_attribute_is_model_validate(value: object) -> None:
    got = attribute(value)  # type: ignore[arg-type]
    assert got == DeviceAttribute.model_validate(value)
    assert type(got) is DeviceAttribute
    assert attribute(got) is got  # a validated one is taken as it is
    assert got.to_api() == DeviceAttribute.model_validate(value).to_api()


def test_attribute_refuses_what_model_validate_refuses() -> None:
    for bad in ({"string": "a", "int": 1}, {}, {"version": "1.2"}, 1.5):
        with pytest.raises(ValidationError) as slow:
            DeviceAttribute.model_validate(bad)
        with pytest.raises(ValidationError) as fast:
            attribute(bad)  # type: ignore[arg-type]
        assert str(fast.value) == str(slow.value)


def test_strings_in_a_list_attribute_are_limited_too() -> None:
    refused_everywhere("strings", ("ok", "y" * 65), "65 bytes")


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
def test_ints_outside_int64_are_refused(value: int) -> None:
    refused_everywhere("int", value, "outside the int64 range")
    refused_everywhere("ints", (1, value), "outside the int64 range")


def test_int64_bounds_are_accepted() -> None:
    render([Device(name="gpu-0", attributes={"a": 2**63 - 1, "b": -(2**63)})])


@pytest.mark.parametrize("version", ["1.2", "2.4", "v1.2.3", "01.2.3", "1.2.3.4", "latest"])
def test_bad_semver_version(version: str) -> None:
    refused_everywhere("version", version, "is not a semantic version")


@pytest.mark.parametrize("version", ["1.2.3", "0.0.0", "1.2.3-rc.1", "1.2.3+build.5", "12.4.0"])
def test_good_semver_version(version: str) -> None:
    render([Device(name="gpu-0", attributes={"fw": DeviceAttribute(version=version)})])


def test_empty_list_attribute_is_rejected() -> None:
    refused_everywhere("ints", (), "may not be empty")


def test_request_policy_needs_allow_multiple_allocations() -> None:
    cap = DeviceCapacity(value="8", request_policy=RequestPolicy(default="1"))
    rejects(
        [Device(name="cpu-0", capacity={"cpu": cap})],
        "cpu-0",
        "capacity cpu has a requestPolicy, which needs allowMultipleAllocations: true",
    )
    render([Device(name="cpu-0", capacity={"cpu": cap}, allow_multiple_allocations=True)])


def test_consumes_counters_must_reference_a_published_counter_set() -> None:
    dev = Device(
        name="gpu-0-mig",
        consumes_counters=(
            CounterConsumption(counter_set="gpu-9-counters", counters={"gib": "1"}),
        ),
    )
    rejects([dev], "gpu-0-mig", "references counter set 'gpu-9-counters'", counter_sets=MEM)


def test_consumes_counters_at_most_two_entries_each_set_once() -> None:
    sets = tuple(CounterSet(name=n, counters={"c": "9"}) for n in ("a", "b", "c"))
    three = Device(
        name="d",
        consumes_counters=tuple(
            CounterConsumption(counter_set=n, counters={"c": "1"}) for n in "abc"
        ),
    )
    rejects([three], "3 consumesCounters entries; at most 2", counter_sets=sets)
    twice = Device(
        name="d",
        consumes_counters=tuple(
            CounterConsumption(counter_set="a", counters={"c": "1"}) for _ in "ab"
        ),
    )
    rejects([twice], "names counter set 'a' twice", counter_sets=sets)


def test_counter_set_names_and_sizes() -> None:
    rejects([], "counter set name", counter_sets=(CounterSet(name="Mem", counters={"c": "1"}),))
    rejects([], "counter name", counter_sets=(CounterSet(name="mem", counters={"GiB": "1"}),))
    big = CounterSet(name="mem", counters={f"c{i}": "1" for i in range(33)})
    rejects([], "33 counters; at most 32", counter_sets=(big,))
    rejects([], "unique within a pool", counter_sets=(*MEM, *MEM))


def test_more_than_16_taints_are_rejected() -> None:
    taints = tuple(DeviceTaint(key=f"example.com/t{i}") for i in range(17))
    rejects([Device(name="gpu-0", taints=taints)], "17 taints; at most 16")


def test_duplicate_device_names_are_rejected() -> None:
    rejects(
        [*plain(3), Device(name="dev-1")], "gpu.example.com/node-1/dev-1", "unique within a pool"
    )


def test_pool_name_rules() -> None:
    with pytest.raises(SliceValidationError, match="pool"):
        render_slices(DRIVER, NODE, [Device(name="d", pool="Rack_7")])
    render_slices(DRIVER, NODE, [Device(name="d", pool="zone-a/rack-7")])


def test_slice_names_stay_dns_subdomains_for_long_pools() -> None:
    pool = f"{'a' * 60}.{'a' * 60}.{'a' * 43}.{'b' * 40}"  # the cut at 189 lands on a '.'
    [s] = render_slices(DRIVER, NODE, [Device(name="d", pool=pool)])
    name = s["metadata"]["name"]
    assert len(name) <= 253
    assert DNS_SUBDOMAIN.match(name), name


@pytest.mark.parametrize("length", [1, 60, 120, 177, 200, 253])
def test_slice_names_are_dns_subdomains(length: int) -> None:
    pool = "-".join(["p" * 9] * 30)[:length].strip("-")
    names = [
        s["metadata"]["name"] for s in render_slices(DRIVER, NODE, [Device(name="d", pool=pool)])
    ]
    for name in names:
        assert len(name) <= 253
        assert DNS_SUBDOMAIN.match(name), name


# -- determinism -------------------------------------------------------------------------------


def _shuffled(devices: list[Device], seed: int) -> list[Device]:
    rng = random.Random(seed)  # noqa: S311 - a reproducible shuffle, not cryptography
    out = []
    for d in devices:
        attrs = list(d.attributes.items())
        caps = list(d.capacity.items())
        rng.shuffle(attrs)
        rng.shuffle(caps)
        out.append(d.model_copy(update={"attributes": dict(attrs), "capacity": dict(caps)}))
    return out


def _rich(n: int) -> list[Device]:
    return [
        Device(
            name=f"gpu-{i}",
            attributes={
                "index": i,
                "uuid": f"GPU-{i:08x}",
                "resource.kubernetes.io/numaNode": i % 2,
                "driverVersion": DeviceAttribute(version="550.54.15"),
                "mig": bool(i % 2),
            },
            capacity={"memory": "80Gi", "sms": "132", "copyEngines": "7"},
        )
        for i in range(n)
    ]


def test_rendering_is_byte_identical() -> None:
    devices = _rich(150)
    first = yaml.safe_dump_all(render(devices, MEM))
    second = yaml.safe_dump_all(render(list(devices), MEM))
    assert first == second


def test_attribute_order_does_not_change_the_output() -> None:
    devices = _rich(20)
    expected = yaml.safe_dump_all(render(devices))
    for seed in range(5):
        assert yaml.safe_dump_all(render(_shuffled(devices, seed))) == expected


# -- every simulated profile, with the default backends ----------------------------------------


def _profile_summary(profile: str) -> dict[str, tuple[int, int]]:
    """driver -> (slices, devices) for a profile rendered through the real start-up path."""
    with open_host(DrakitSettings(profile=profile)) as host:
        inv = build_inventory(host)
        slices = inv.slices()
        again = inv.slices()
    assert yaml.safe_dump_all(slices) == yaml.safe_dump_all(again)
    out: dict[str, tuple[int, int]] = {}
    for s in slices:
        n_slices, n_devices = out.get(s["spec"]["driver"], (0, 0))
        out[s["spec"]["driver"]] = (n_slices + 1, n_devices + len(s["spec"].get("devices", [])))
    return out


# What each profile publishes with the default backends (cpu, nvidia_gpu, amd_gpu, amd_ainic,
# composite): driver -> (slices, devices). CPU devices are grouped per NUMA node. With the
# composite enabled by default, the GPU and NIC backends publish under its driver, every GPU and
# NIC a counter set (at most 8 per slice, in slices of their own) that the lone device and the
# GPU-NIC pair holding it both consume, so GPUs, NICs and pairs are one pool.
PAIRS = "pairs.composite.drakit.io"
EXPECTED_PROFILES: dict[str, dict[str, tuple[int, int]]] = {
    "minimal-1s": {"cpu.drakit.io": (1, 1)},
    "epyc-genoa-2s": {"cpu.drakit.io": (1, 2)},
    "epyc-genoa-2s-nps4": {"cpu.drakit.io": (1, 8)},
    "spr-2s-snc2": {"cpu.drakit.io": (1, 4)},
    "dgx-h100": {"cpu.drakit.io": (1, 2), PAIRS: (2, 8)},  # 8 GPUs, no NIC: no pairs
    "mi300x-8gpu-8ainic": {"cpu.drakit.io": (1, 2), PAIRS: (3, 24)},  # 8 + 8 + 8 pairs
    "h200-8gpu-8ainic": {"cpu.drakit.io": (1, 2), PAIRS: (3, 24)},
    "h200-8gpu-8ainic-sriov": {"cpu.drakit.io": (1, 2), PAIRS: (3, 24)},
}


def test_expected_table_names_real_profiles() -> None:
    assert set(EXPECTED_PROFILES) <= set(list_profiles())


@pytest.mark.parametrize("profile", list_profiles())
def test_every_profile_renders_with_the_default_backends(profile: str) -> None:
    summary = _profile_summary(profile)
    assert summary["cpu.drakit.io"][1] == profile_info(profile).numa_nodes > 0
    expected = EXPECTED_PROFILES.get(profile)  # a profile registered at run time has no row
    if expected is not None:
        assert summary == expected


# -- taints, request policies, partial pools, names in publishing order -------------------------


def tainted(key: str, value: str = "") -> Device:
    return Device(name="gpu-0", taints=(DeviceTaint(key=key, value=value),))


@pytest.mark.parametrize(
    "key", ["ok", "example.com/unhealthy", "a.b-c_d", "k" * 63, ("p" * 63 + ".") * 3 + "p/x"]
)
def test_taint_keys_that_are_label_names(key: str) -> None:
    render([tainted(key)])


@pytest.mark.parametrize(
    "key", ["", "bad key", "-x", "x-", "k" * 64, "example.com/", "Bad_Prefix/x", "a/b/c", "k\u00e9"]
)
def test_taint_keys_that_are_not_label_names(key: str) -> None:
    rejects([tainted(key)], "gpu-0", f"taint key {key!r} must be a label name")


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        ("v" * 63, True),
        ("v" * 64, False),
        ("a/b", False),
        ("-a", False),
        ("a.b_c-d", True),
    ],
)
def test_taint_values_are_label_values(value: str, ok: bool) -> None:
    if ok:
        render([tainted("k", value)])
    else:
        rejects([tainted("k", value)], "gpu-0", "must be a label value")


def shared(policy: RequestPolicy, value: str = "100Gi") -> Device:
    return Device(
        name="gpu-0",
        allow_multiple_allocations=True,
        capacity={"mem": DeviceCapacity(value=value, request_policy=policy)},
    )


@pytest.mark.parametrize(
    ("policy", "fragment"),
    [
        (RequestPolicy(valid_values=("1Gi",)), "default is required"),
        (RequestPolicy(default="1Gi", valid_values=("2Gi", "1Gi")), "ascending"),
        (RequestPolicy(default="1Gi", valid_values=("1Gi", "1024Mi")), "unique"),
        (
            RequestPolicy(default="1Gi", valid_values=tuple(f"{i}Gi" for i in range(1, 12))),
            "1 to 10",
        ),
        (RequestPolicy(default="1Gi", valid_values=("1Gi", "101Gi")), "exceed the capacity"),
        (RequestPolicy(default="3Gi", valid_values=("1Gi", "2Gi")), "must be one of validValues"),
        (RequestPolicy(default="1Gi", valid_range=ValidRange(min="101Gi")), "min exceeds the cap"),
        (RequestPolicy(default="1Gi", valid_range=ValidRange(min="1Gi", max="101Gi")), "max exc"),
        (
            RequestPolicy(default="5Gi", valid_range=ValidRange(min="6Gi", max="5Gi")),
            "min exceeds max",
        ),
        (RequestPolicy(default="1Gi", valid_range=ValidRange(min="2Gi")), "outside the range"),
        (RequestPolicy(default="1Gi", valid_range=ValidRange(min="1Gi", step="0")), "positive"),
        (
            RequestPolicy(default="1Gi", valid_range=ValidRange(min="1Gi", step="100Gi")),
            "min + step",
        ),
        (
            RequestPolicy(default="1536Mi", valid_range=ValidRange(min="1Gi", step="1Gi")),
            "default off-step",
        ),
        (
            RequestPolicy(
                default="1Gi", valid_range=ValidRange(min="1Gi", max="2560Mi", step="1Gi")
            ),
            "max is off-step",
        ),
    ],
)
def test_request_policy_rules(policy: RequestPolicy, fragment: str) -> None:
    rejects([shared(policy)], "gpu-0", "capacity mem: requestPolicy", fragment)


@pytest.mark.parametrize(
    "policy",
    [
        RequestPolicy(default="1Gi"),
        RequestPolicy(default="1Gi", valid_values=("1Gi", "2Gi", "100Gi")),
        RequestPolicy(default="2Gi", valid_range=ValidRange(min="1Gi", max="100Gi", step="1Gi")),
        RequestPolicy(default="500m", valid_range=ValidRange(min="500m")),
    ],
)
def test_valid_request_policies_render(policy: RequestPolicy) -> None:
    render([shared(policy)])


def test_check_pool_leaves_out_only_what_is_rejected() -> None:
    devices = [*plain(3), tainted("bad key"), Device(name="dev-1"), *plain(2, "ok")]
    spec = PoolSpec(driver=DRIVER, node=NODE, pool=NODE, devices=tuple(devices))
    kept, errors = check_pool(spec)
    assert [d.name for d in kept.devices] == ["dev-0", "dev-1", "dev-2", "ok-0", "ok-1"]
    assert [str(e).split(":")[0] for e in errors] == [
        f"device {DRIVER}/{NODE}/gpu-0",
        f"device {DRIVER}/{NODE}/dev-1",
    ]
    assert check_pool(kept) == (kept, [])


def test_check_pool_returns_a_clean_pool_unchanged() -> None:
    spec = PoolSpec(driver=DRIVER, node=NODE, pool=NODE, devices=tuple(plain(3)))
    kept, errors = check_pool(spec)
    assert kept is spec
    assert errors == []


@pytest.mark.parametrize("count", [1, 9, 10, 11, 99, 100, 101, 1000, 12345])
def test_slice_names_sort_in_publishing_order(count: int) -> None:
    names = [slice_name("node-1-gpu.example.com", i) for i in range(count)]
    assert sorted(names) == names
    assert len(set(names)) == count
    assert all(DNS_SUBDOMAIN.match(n) for n in names)


def test_slice_names_of_a_big_pool_sort_like_its_devices() -> None:
    slices = render(plain(128 * 12))  # 12 slices: the tenth must not sort before the second
    names = [s["metadata"]["name"] for s in slices]
    assert sorted(names) == names
    by_name = sorted(slices, key=lambda s: s["metadata"]["name"])
    order = [d["name"] for s in by_name for d in s["spec"]["devices"]]
    assert order == [f"dev-{i}" for i in range(128 * 12)]
