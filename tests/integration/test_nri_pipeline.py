"""What the prepare pipeline keeps for drakit's NRI plugin, on simulated hardware.

The pods a claim is reserved for (``status.reservedFor``, the NRI plugin's pod -> claims map),
the ``networkData`` a sandbox hook returns, and the fail-closed guard mount in the CDI spec.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from tests.integration.claims import NODE, claim

from drakit.enforce.guard import GUARD_DIR, guard_mount
from drakit.host.pluginhost import PluginHost
from drakit.models import NetworkData
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore

GPU = "gpu.nvidia.drakit.io"


def _state(host: PluginHost, claims: ClaimStore, root: Path, *, guard: bool) -> DriverState:
    return DriverState(
        GPU,
        host,
        claims,
        state_dir=root / "state",
        cdi_dir=root / "cdi",
        boot_id="boot-1",
        guard=functools.partial(guard_mount, root / "state", GPU) if guard else None,
    )


def _reserve(claims: ClaimStore, name: str, *pods: str) -> None:
    obj: dict[str, Any] = claims.claims[("ns", name)]
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": p} for p in pods]


def test_the_pods_of_a_claim_are_recorded_and_a_second_pod_is_added(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = _state(host, claims, tmp_path, guard=False)
    ref = claim(claims, [{"request": "g", "driver": GPU, "pool": NODE, "device": "gpu-0"}])
    _reserve(claims, ref.name, "pod-a")
    assert state.prepare([ref])[ref.uid].error == ""
    assert state.prepared_claims()[ref.uid].reserved_for == ["pod-a"]
    _reserve(claims, ref.name, "pod-a", "pod-b")  # a second pod shares the claim
    assert state.prepare([ref])[ref.uid].error == ""
    assert state.prepared_claims()[ref.uid].reserved_for == ["pod-a", "pod-b"]
    state.close()


def test_network_data_from_a_sandbox_hook_is_recorded_once(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = _state(host, claims, tmp_path, guard=False)
    ref = claim(claims, [{"request": "g", "driver": GPU, "pool": NODE, "device": "gpu-1"}])
    assert state.prepare([ref])[ref.uid].error == ""
    (device,) = state.prepared_claims()[ref.uid].prepared["nvidia_gpu"]
    moved = device.model_copy(update={"network_data": NetworkData(interface_name="net1")})
    assert state.record_network_data(ref.uid, "nvidia_gpu", [moved])
    assert not state.record_network_data(ref.uid, "nvidia_gpu", [moved])  # nothing new
    assert not state.record_network_data("no-such-claim", "nvidia_gpu", [moved])
    (kept,) = state.prepared_claims()[ref.uid].prepared["nvidia_gpu"]
    assert kept.network_data is not None
    assert kept.network_data.interface_name == "net1"
    state.close()


def test_with_fail_closed_every_device_carries_a_guard_mount_whose_source_is_missing(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = _state(host, claims, tmp_path, guard=True)
    ref = claim(
        claims,
        [
            {"request": "g", "driver": GPU, "pool": NODE, "device": "gpu-2"},
            {"request": "g", "driver": GPU, "pool": NODE, "device": "gpu-3"},
        ],
    )
    assert state.prepare([ref])[ref.uid].error == ""
    (spec,) = (json.loads(p.read_text()) for p in (tmp_path / "cdi").iterdir())
    for device in spec["devices"]:
        guards = [
            m
            for m in device["containerEdits"]["mounts"]
            if m["containerPath"].startswith(GUARD_DIR)
        ]
        assert [g["containerPath"] for g in guards] == [f"{GUARD_DIR}/{device['name']}"]
        assert not Path(guards[0]["hostPath"]).exists()
        assert Path(guards[0]["hostPath"]).parent == tmp_path / "state" / GPU
    state.close()
