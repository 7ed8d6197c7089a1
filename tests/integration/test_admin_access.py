"""adminAccess on the node: a monitoring claim on a device a workload holds.

The scheduler allocates a device to a claim whose request has ``adminAccess`` whoever holds it
(KEP-5018, GA since 1.36). The node must then prepare it beside the workload's claim: no
exclusivity clash, the workload's record and CDI spec untouched, the monitoring claim's spec
with the device nodes; unpreparing either leaves the other; a restart keeps all of it.
These run the real DriverState, backends, checkpoint and CDI writer (the same on a real control
plane with the scheduler: tests/e2e/test_admin_access.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.claims import NODE, claim, make_state

from drakit.host.pluginhost import PluginHost
from drakit.testing import ClaimStore

GPU = "gpu.nvidia.drakit.io"
NODES = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def gpu(device: str, *, admin: bool = False, request: str = "gpu") -> dict[str, Any]:
    out: dict[str, Any] = {"request": request, "driver": GPU, "pool": NODE, "device": device}
    if admin:
        out["adminAccess"] = True
    return out


def spec_of(root: Path, uid: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "cdi" / f"k8s.{GPU}-claim_{uid}.json").read_text())
    return doc


def test_admin_claim_prepares_beside_the_workload_and_leaves_it_alone(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    work = claim(claims, [gpu("gpu-0")], name="workload")
    assert state.prepare([work])[work.uid].error == ""
    before = state.prepared_claims()[work.uid]
    spec_path = tmp_path / "cdi" / f"k8s.{GPU}-claim_{work.uid}.json"
    spec_bytes = spec_path.read_bytes()

    admin = claim(claims, [gpu("gpu-0", admin=True)], name="monitor")
    res = state.prepare([admin])[admin.uid]
    assert res.error == ""
    assert [d.device for d in res.devices] == ["gpu-0"]
    edits = spec_of(tmp_path, admin.uid)["devices"][0]["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == NODES
    records = state.prepared_claims()
    assert records[work.uid] == before  # the workload's record is untouched
    assert spec_path.read_bytes() == spec_bytes
    assert records[admin.uid].admin_requests == ["gpu"]

    # a second workload is still refused: the first holds the GPU, the monitor does not
    other = claim(claims, [gpu("gpu-0")], name="other")
    assert "still prepared for claim ns/workload" in state.prepare([other])[other.uid].error

    # unprepare the monitor: the workload keeps its record and spec
    assert state.unprepare([admin])[admin.uid].error == ""
    assert state.prepared_claims() == {work.uid: before}
    assert spec_path.read_bytes() == spec_bytes

    # and the other way round: the workload goes, the monitor stays
    assert state.prepare([admin])[admin.uid].error == ""
    admin_spec = spec_of(tmp_path, admin.uid)
    assert state.unprepare([work])[work.uid].error == ""
    assert not spec_path.exists()
    assert set(state.prepared_claims()) == {admin.uid}
    assert spec_of(tmp_path, admin.uid) == admin_spec

    # the monitor holds nothing: a new workload gets the GPU while it is prepared
    assert state.prepare([other])[other.uid].error == ""
    assert set(state.prepared_claims()) == {admin.uid, other.uid}


def test_admin_and_workload_in_one_call_and_two_monitors(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    admin = claim(claims, [gpu("gpu-1", admin=True)], name="monitor-a")
    work = claim(claims, [gpu("gpu-1")], name="workload")
    admin2 = claim(claims, [gpu("gpu-1", admin=True)], name="monitor-b")
    out = state.prepare([admin, work, admin2])
    assert {uid: r.error for uid, r in out.items()} == {admin.uid: "", work.uid: "", admin2.uid: ""}


def test_a_claim_mixing_admin_and_plain_requests_holds_only_the_plain_ones(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    work = claim(claims, [gpu("gpu-2")], name="workload")
    assert state.prepare([work])[work.uid].error == ""
    mixed = claim(
        claims,
        [gpu("gpu-2", admin=True, request="watch"), gpu("gpu-3", request="own")],
        name="mixed",
    )
    assert state.prepare([mixed])[mixed.uid].error == ""
    assert state.prepared_claims()[mixed.uid].admin_requests == ["watch"]
    third = claim(claims, [gpu("gpu-3")], name="third")
    assert "still prepared for claim ns/mixed" in state.prepare([third])[third.uid].error


def test_admin_access_survives_a_restart(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    work = claim(claims, [gpu("gpu-4")], name="workload")
    admin = claim(claims, [gpu("gpu-4", admin=True)], name="monitor")
    assert state.prepare([work])[work.uid].error == ""
    assert state.prepare([admin])[admin.uid].error == ""
    records = state.prepared_claims()
    state.close()

    again = make_state(host, claims, tmp_path)  # a new process over the same files
    assert again.prepared_claims() == records
    # the kubelet repeats both prepares after its own restart: idempotent, no clash
    assert again.prepare([admin])[admin.uid].error == ""
    assert again.prepare([work])[work.uid].error == ""
    assert again.unprepare([work])[work.uid].error == ""
    assert set(again.prepared_claims()) == {admin.uid}
    later = claim(claims, [gpu("gpu-4")], name="later")
    assert again.prepare([later])[later.uid].error == ""
    again.close()


def test_admin_access_survives_a_lost_checkpoint(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    """The monitoring claim's spec says its device was for adminAccess: rebuilt, it holds none."""
    state = make_state(host, claims, tmp_path)
    work = claim(claims, [gpu("gpu-5")], name="workload")
    admin = claim(claims, [gpu("gpu-5", admin=True)], name="monitor")
    assert state.prepare([work])[work.uid].error == ""
    assert state.prepare([admin])[admin.uid].error == ""
    env = spec_of(tmp_path, admin.uid)["devices"][0]["containerEdits"]["env"]
    assert "DRA_ADMIN_ACCESS=true" in env  # as dra-example-driver tells a monitoring container
    assert "DRA_ADMIN_ACCESS=true" not in spec_of(tmp_path, work.uid)["devices"][0][
        "containerEdits"
    ].get("env", [])
    state.close()
    (tmp_path / "state" / GPU / "checkpoint.json").unlink()  # lost

    again = make_state(host, claims, tmp_path)
    records = again.prepared_claims()
    assert records[admin.uid].recovered
    assert records[admin.uid].admin_requests
    assert records[work.uid].recovered
    assert not records[work.uid].admin_requests
    later = claim(claims, [gpu("gpu-5")], name="later")
    assert "still prepared for claim" in again.prepare([later])[later.uid].error  # the workload
    assert again.unprepare([work])[work.uid].error == ""
    assert again.prepare([later])[later.uid].error == ""  # the monitor holds nothing
    again.close()
