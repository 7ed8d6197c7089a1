"""Selector results shared by the device values an expression reads (``Selector.reads``).

A selector that reads the device only through values named in its text gets one evaluation per
distinct set of those values; everything else is evaluated per device content as before. These
tests check which expressions qualify, and that a shared result always equals the evaluation on
the device itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drakit.allocator.api import Device
from drakit.allocator.cel import CelError, DeviceEnv, Selector, device_input


@pytest.mark.parametrize(
    ("expression", "reads"),
    [
        ('device.driver == "a.io"', ()),
        (
            'device.driver == "a.io" && device.attributes["a.io"].type in ["gpu", "mig"]',
            (("attributes", "a.io", "type"),),
        ),
        (
            "has(device.attributes['r.io'].numaNode) && device.attributes['r.io'].numaNode == 0",
            (("attributes", "r.io", "numaNode"),),
        ),
        (
            'device.capacity["a.io"]["memory"].isGreaterThan(quantity("1Gi")) '
            '&& device.attributes["a.io"].v.major() == 1',
            (("attributes", "a.io", "v"), ("capacity", "a.io", "memory")),
        ),
        ("device.allowMultipleAllocations", ()),
        ('device.driver.startsWith("a")', ()),
        # the device (or one of its maps) used whole, or read by what the text cannot name
        ('"numa" in device.attributes["a.io"]', None),
        ('size(device.attributes["a.io"]) > 0', None),
        ('device.attributes["a.io"].exists(k, k == "numa")', None),
        ("device.attributes[device.driver].numa == 0", None),
        ("[1].exists(device, device == 1)", None),
        ('device.attributes["a\\x2eio"].numa == 0', None),
        ('"device" == "x"', None),
        ("device == device", None),
    ],
)
def test_what_an_expression_reads(expression: str, reads: tuple[Any, ...] | None) -> None:
    assert Selector(expression).reads == reads


_NAMES = st.sampled_from(["a", "numa", "dx.io/a", "a.io/numa"])
_VALUES = st.sampled_from(
    [
        {"int": 1},
        {"int": 0},
        {"bool": True},
        {"string": "1.0.0"},
        {"version": "1.0.0"},
        {"version": "2.1.0"},
        {"ints": [1]},
    ]
)
_DEVICES = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["d0", "d1"]),
        "attributes": st.dictionaries(_NAMES, _VALUES, max_size=3),
        "capacity": st.dictionaries(
            st.sampled_from(["memory", "dx.io/bw"]),
            st.sampled_from(["1", "1k", "1000", "2Gi"]).map(lambda v: {"value": v}),
            max_size=2,
        ),
        "allowMultipleAllocations": st.sampled_from([None, False, True]),
    }
)
_EXPRESSIONS = st.sampled_from(
    [
        'device.attributes["a.io"].a == 1',
        'device.attributes["a.io"].numa == 0 || device.attributes["dx.io"].a == true',
        'has(device.attributes["dx.io"].a) && device.attributes["dx.io"].a == "1.0.0"',
        'device.attributes["a.io"]["numa"].major() == 1',
        'device.capacity["a.io"].memory.isGreaterThan(quantity("500"))',
        'device.capacity["dx.io"]["bw"].compareTo(quantity("1k")) == 0',
        'device.driver == "a.io" && has(device.attributes["a.io"].a)',
        "device.allowMultipleAllocations",
        '"numa" in device.attributes["a.io"]',
        'size(device.attributes["dx.io"]) > 0',
    ]
)


def _evaluate(selector: Selector, driver: str, device: Device, shared: bool) -> bool | str:
    def env() -> DeviceEnv:
        return DeviceEnv(device_input(driver, device))

    try:
        if shared:
            return selector.matches_device(driver, device, env)
        return selector.matches(env())
    except CelError:
        return "error"


@settings(max_examples=400, deadline=None)
@given(
    _EXPRESSIONS,
    st.sampled_from(["a.io", "dx.io"]),
    st.lists(_DEVICES, min_size=2, max_size=4),
)
def test_a_shared_result_equals_the_evaluation_on_the_device(
    expression: str, driver: str, raws: list[dict[str, Any]]
) -> None:
    """Devices evaluated one after the other by one selector (results shared where what it
    reads is equal) get what a fresh evaluation on each gives, errors included."""
    selector = Selector(expression)
    for raw in raws:
        device = Device.model_validate(raw)
        alone = _evaluate(Selector(expression), driver, device, shared=False)
        assert _evaluate(selector, driver, device, shared=True) == alone, raw


def test_devices_differing_in_what_is_not_read_share_one_evaluation() -> None:
    selector = Selector('device.attributes["a.io"].type == "gpu"')
    built: list[str] = []
    for serial in ("s1", "s2", "s3"):
        device = Device.model_validate(
            {
                "name": "gpu-0",
                "attributes": {"type": {"string": "gpu"}, "serial": {"string": serial}},
            }
        )

        def env(device: Device = device, serial: str = serial) -> DeviceEnv:
            built.append(serial)
            return DeviceEnv(device_input("a.io", device))

        assert selector.matches_device("a.io", device, env)
    assert built == ["s1"]
    other = Device.model_validate({"name": "nic-0", "attributes": {"type": {"string": "pf"}}})
    assert not selector.matches_device(
        "a.io", other, lambda: DeviceEnv(device_input("a.io", other))
    )
