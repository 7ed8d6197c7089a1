"""Property tests (hypothesis, bounded) for what reaches the prepare pipeline from outside.

* claims as the API server delivers them: any JSON shape under ``status.allocation`` fails (or
  succeeds) per claim, never the whole call, and never raises;
* the checkpoint file: whatever bytes are in it, loading never raises, and damage is moved aside
  while a valid file round-trips exactly.

Real DriverState, plugin host on simulated sysfs, checkpoint and CDI writer; claims come from an
in-memory source (the API server's JSON is what hypothesis generates).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import ClaimRef
from drakit.prepare.checkpoint import Checkpoint, CheckpointStore, ClaimPhase, ClaimRecord
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore

GPU = "gpu.nvidia.drakit.io"
NODE = "node-a"
BOUNDED = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def near_valid_result() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "request": st.one_of(st.just("gpus"), json_values),
            "driver": st.sampled_from([GPU, "other.io"]),
            "pool": st.sampled_from([NODE, "", "other"]),
            "device": st.sampled_from(["gpu-0", "gpu-1", "nope", ""]),
        },
        optional={
            "shareID": json_values,
            "consumedCapacity": json_values,
            "adminAccess": json_values,
        },
    )


result_lists = st.lists(near_valid_result(), max_size=3)

allocations = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "devices": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {
                        "results": st.one_of(
                            json_values, st.lists(near_valid_result(), max_size=3)
                        ),
                        "config": st.one_of(
                            json_values,
                            st.lists(
                                st.fixed_dictionaries(
                                    {
                                        "source": st.sampled_from(["FromClass", "FromClaim", 3]),
                                        "opaque": st.one_of(
                                            json_values,
                                            st.fixed_dictionaries(
                                                {"driver": st.just(GPU), "parameters": json_values}
                                            ),
                                        ),
                                    }
                                ),
                                max_size=2,
                            ),
                        ),
                    }
                ),
            )
        }
    ),
)


@pytest.fixture(scope="module")
def host() -> Iterator[PluginHost]:
    settings_ = DrakitSettings(
        profile="h200-8gpu-8ainic", node_name=NODE, plugins={"nvidia_gpu": {}}
    )
    with open_host(settings_) as h:
        build_inventory(h)
        yield h


@BOUNDED
@given(allocation=allocations)
def test_claims_as_delivered_fail_alone(host: PluginHost, allocation: Any) -> None:
    root = Path(tempfile.mkdtemp(prefix="dkp-"))
    try:
        claims = ClaimStore()
        state = DriverState(
            GPU, host, claims, state_dir=root / "s", cdi_dir=root / "c", boot_id="b"
        )
        odd_uid, good_uid = str(uuid.uuid4()), str(uuid.uuid4())
        claims.add(
            {
                "metadata": {"namespace": "ns", "name": "odd", "uid": odd_uid},
                "status": {"allocation": allocation},
            }
        )
        claims.add(
            {
                "metadata": {"namespace": "ns", "name": "good", "uid": good_uid},
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {"request": "r", "driver": GPU, "pool": NODE, "device": "gpu-7"}
                            ]
                        }
                    }
                },
            }
        )
        refs = [
            ClaimRef(namespace="ns", name="odd", uid=odd_uid),
            ClaimRef(namespace="ns", name="good", uid=good_uid),
        ]
        res = state.prepare(refs)
        assert set(res) == {odd_uid, good_uid}
        assert res[good_uid].error == ""
        if res[odd_uid].error:
            assert res[odd_uid].error.startswith("claim ns/odd: ")
        un = state.unprepare(refs)
        assert all(r.error == "" for r in un.values())
        assert state.prepared_claims() == {}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _valid_file(tmp: Path) -> tuple[Path, Checkpoint]:
    store = CheckpointStore(tmp / "checkpoint.json", GPU, "b")
    cp = store.load()
    for i in range(3):
        cp.claims[f"u{i}"] = ClaimRecord(
            namespace="ns", name=f"c{i}", uid=f"u{i}", phase=ClaimPhase.PREPARE_COMPLETED
        )
    store.save(cp)
    return store.path, cp


@BOUNDED
@given(data=st.data())
def test_any_checkpoint_bytes_load_without_raising(data: st.DataObject) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="dkc-"))
    try:
        path, cp = _valid_file(tmp)
        raw = bytearray(path.read_bytes())
        kind = data.draw(st.sampled_from(["flip", "truncate", "garbage", "json"]))
        if kind == "flip":
            for _ in range(data.draw(st.integers(1, 5))):
                i = data.draw(st.integers(0, len(raw) - 1))
                raw[i] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        elif kind == "garbage":
            raw = bytearray(data.draw(st.binary(max_size=200)))
        else:
            import json

            raw = bytearray(json.dumps(data.draw(json_values)).encode())
        path.write_bytes(bytes(raw))
        repairs: list[str] = []
        store = CheckpointStore(path, GPU, "b", on_repair=lambda r, _m, _n: repairs.append(r))
        got = store.load()
        if repairs:
            assert repairs == ["corrupt"]
            assert got.claims == {}
            assert any(".corrupt-" in p.name for p in tmp.iterdir())
        else:
            assert got.claims == cp.claims  # unchanged meaning (e.g. a flip in whitespace)
        again = CheckpointStore(path, GPU, "b").load()  # what was left behind is valid
        assert again.claims == got.claims
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
