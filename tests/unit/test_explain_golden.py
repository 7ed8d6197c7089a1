"""The allocator and ``explain`` answer as they did before their fleet-scale work.

Also: devices share a CEL environment (its cache is keyed by content) only when CEL would see
them alike; slices read for explain share one device object per distinct device, and a bad
device still fails its slice by name and path; ``.json`` files are read as JSON.

``explain_golden.outcomes()`` (small fleets whose nodes publish devices of the same content
under different names: generated scenarios with capacities, counters, taints, constraints,
and drakit's composite shape) against the outcomes recorded before the caches keyed by device
content and the per-set counter checks went in: allocations and every reason, word for word.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.explain_golden import GOLDEN, outcomes

from drakit.allocator.api import Device, ResourceSlice
from drakit.allocator.cel import DeviceEnv, content_key, device_input
from drakit.errors import ConfigInvalid
from drakit.explain.sources import parse_slices, read_objects


def test_results_and_reasons_are_unchanged() -> None:
    want = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(outcomes(), sort_keys=True))
    assert got["drakit"] == want["drakit"]
    assert got["drakit_jobs"] == want["drakit_jobs"]
    assert got["jobs"] == want["jobs"]
    for i, (g, w) in enumerate(zip(got["scenarios"], want["scenarios"], strict=True)):
        assert g == w, f"scenario {i} ({w['kind']})"


# --- the content key of a device's CEL input ---------------------------------------------------

_NAMES = st.sampled_from(["a", "dx.io/a", "numa"])
# values that are equal or alike in Python but not to CEL: 1 and True, a string and a version
_VALUES = st.sampled_from(
    [
        {"int": 1},
        {"int": 0},
        {"bool": True},
        {"bool": False},
        {"string": "1.0.0"},
        {"version": "1.0.0"},
        {"ints": [1]},
        {"bools": [True]},
        {"strings": ["1.0.0"]},
        {"versions": ["1.0.0"]},
    ]
)
_DEVICES = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["d0", "d1"]),
        "attributes": st.dictionaries(_NAMES, _VALUES, max_size=2),
        "capacity": st.dictionaries(
            st.sampled_from(["memory", "dx.io/bw"]),
            st.sampled_from(["1", "1k", "1000"]).map(lambda v: {"value": v}),
            max_size=2,
        ),
        "allowMultipleAllocations": st.sampled_from([None, False, True]),
    }
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["a.io", "dx.io"]), _DEVICES, st.sampled_from(["a.io", "dx.io"]), st.data())
def test_equal_content_keys_mean_equal_cel_inputs(
    d1: str, raw1: dict[str, Any], d2: str, data: st.DataObject
) -> None:
    """Devices share a CEL environment only when their ``device`` variables are equal.

    The second device is the first with some values replaced (often by one equal in Python but
    not in CEL) or another device altogether; "equal" is compared as JSON (``1 != true``).
    """
    raw2 = data.draw(
        st.one_of(
            _DEVICES,
            st.fixed_dictionaries(
                {k: st.just(v) for k, v in raw1.items() if k != "attributes"}
                | {"attributes": st.fixed_dictionaries({n: _VALUES for n in raw1["attributes"]})}
            ),
        )
    )
    a, b = Device.model_validate(raw1), Device.model_validate(raw2)
    if content_key(d1, a) == content_key(d2, b):
        assert _typed(device_input(d1, a)) == _typed(device_input(d2, b))
        assert DeviceEnv.of(d1, a) is DeviceEnv.of(d2, b)
    same = Device.model_validate({**raw1, "name": "elsewhere"})
    assert content_key(d1, same) == content_key(d1, a)


def _typed(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


# --- reading a fleet's slices ------------------------------------------------------------------


def _slice_doc(node: str, devices: list[Any]) -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {"driver": "gpu.io", "pool": {"name": node}, "nodeName": node, "devices": devices},
    }


def _gpu(i: int, memory: Any = "80Gi") -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "attributes": {"index": {"int": i}},
        "capacity": {"memory": {"value": memory}},
    }


def test_slices_share_one_device_per_content_and_equal_the_plain_parse() -> None:
    docs = [_slice_doc(f"n{n}", [_gpu(0), _gpu(1)]) for n in range(3)]
    slices = parse_slices(docs, "slices")
    assert slices == [ResourceSlice.model_validate(d) for d in docs]
    assert len({id(d) for s in slices for d in s.spec.devices}) == 2


def test_slices_of_devices_all_different_read_the_same() -> None:
    """Past the first few hundred distinct devices without repeats, sharing stops: same slices."""
    docs = [_slice_doc(f"n{n}", [_gpu(n), _gpu(n + 1, "40Gi")]) for n in range(400)]
    docs += [_slice_doc("again", [_gpu(0)]), _slice_doc("bad", [_gpu(0, "eighty")])]
    with pytest.raises(ConfigInvalid, match=r"bad-gpu: spec\.devices\[0\]"):
        parse_slices(docs, "slices")
    slices = parse_slices(docs[:-1], "slices")
    assert slices == [ResourceSlice.model_validate(d) for d in docs[:-1]]


def test_values_are_shared_where_devices_are_not() -> None:
    """Devices all different (an index each) still repeat attribute and capacity values: each
    distinct value is validated once and shared; the slices equal the plain parse, and a bad
    value fails its slice by name and path."""
    docs = [
        _slice_doc(
            f"n{n}", [{**_gpu(n), "attributes": {"index": {"int": n}, "model": {"string": "H200"}}}]
        )
        for n in range(700)
    ]
    slices = parse_slices(docs, "slices")
    assert slices == [ResourceSlice.model_validate(d) for d in docs]
    models = {id(s.spec.devices[0].attributes["model"]) for s in slices}
    memories = {id(s.spec.devices[0].capacity["memory"]) for s in slices}
    assert len(models) == 1
    assert len(memories) == 1
    bad = _slice_doc("late", [{**_gpu(0), "attributes": {"index": {"int": 1, "bool": True}}}])
    with pytest.raises(ConfigInvalid, match=r"late-gpu: spec\.devices\[0\]\.attributes\.index"):
        parse_slices([*docs, bad], "slices")


def test_a_bad_device_fails_its_slice_by_name_and_path_as_before() -> None:
    docs = [_slice_doc("n0", [_gpu(0)]), _slice_doc("n1", [_gpu(0), _gpu(1, "eighty")])]
    with pytest.raises(ConfigInvalid) as got:
        parse_slices(docs, "slices")
    assert str(got.value) == (
        "slices: n1-gpu: spec.devices[1].capacity.memory.value: 'eighty' is not a Kubernetes "
        "quantity (examples: 8, 80Gi, 500m)"
    )


def test_json_files_are_read_as_json_past_a_million_values(tmp_path: Path) -> None:
    """``kubectl get resourceslices -o json`` of a large cluster: no alias limit, no YAML pass."""
    path = tmp_path / "slices.json"
    path.write_text(json.dumps({"kind": "List", "items": [{"values": [0] * 1_000_001}]}))
    [obj] = read_objects([path])
    assert len(obj["values"]) == 1_000_001


def test_bad_json_files_fail_naming_the_file(tmp_path: Path) -> None:
    yaml_inside = tmp_path / "yaml.json"
    yaml_inside.write_text("kind: List\nitems:\n- {a: 1}\n")
    assert read_objects([yaml_inside]) == [{"a": 1}]
    broken = tmp_path / "broken.json"
    broken.write_text('{"kind": "List", "items": [')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigInvalid, match=r"broken\.json.*cannot read"):
        read_objects([broken])
    with pytest.raises(ConfigInvalid, match=r"deep\.json.*nested too deep"):
        read_objects([deep])
