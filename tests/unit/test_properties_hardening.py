"""Property tests (hypothesis, bounded) for what issue 30 hardened.

- the webhook's recursion-free JSON decoder agrees with ``json.loads`` on every document within
  its depth, and cuts deeper ones instead of failing;
- a state file holding any bytes at all is either read back exactly or quarantined with a
  reason, never an exception other than the file system's and never a hang;
- ``yaml_shape_problem`` answers for any small YAML document without expanding it, and what it
  accepts loads.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drakit.host.settings import yaml_shape_problem
from drakit.statefiles import StateFile
from drakit.webhook.review import TOO_DEEP, loads_bounded

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(JSON, st.booleans())
def test_loads_bounded_is_json_loads_within_its_depth(value: Any, indent: bool) -> None:
    text = json.dumps(value, indent=2 if indent else None)
    assert loads_bounded(text) == json.loads(text)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@FAST
@given(JSON, st.integers(min_value=1, max_value=4))
def test_loads_bounded_cuts_what_is_deeper_than_its_bound(value: Any, bound: int) -> None:
    got = loads_bounded(json.dumps(value), max_depth=bound)
    assert _depth(got) <= bound
    if _depth(value) <= bound:
        assert got == value
    else:
        assert TOO_DEEP in json.dumps(got, default=str) or TOO_DEEP in str(got)


@FAST
@given(st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v).encode()))
def test_a_state_file_with_any_content_is_read_or_quarantined(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.json"
        path.write_bytes(content)
        sf = StateFile(path, kind="Ledger")
        got = sf.read()
        if sf.damage is None:  # only a file this module wrote reads back
            raise AssertionError(f"{content!r} read as {got!r} without damage")
        assert got is None
        assert sf.damage.moved_to.exists()
        assert not path.exists()
        sf.write({"back": got})
        assert sf.read() == {"back": None}


@FAST
@given(JSON)
def test_any_data_round_trips_through_a_state_file(value: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sf = StateFile(Path(tmp) / "s.json", kind="K")
        sf.write(value)
        assert sf.read() == value
        assert sf.damage is None


@FAST
@given(JSON)
def test_yaml_shape_accepts_what_it_can_load(value: Any) -> None:
    text = yaml.safe_dump(value)
    problem = yaml_shape_problem(text)
    if _depth(value) < 32:
        assert problem is None, problem
        assert yaml.safe_load(text) == value
