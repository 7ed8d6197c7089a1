"""A pair's prepare goes through its members' own backends: the real pipeline, simulated h200.

The prepare pipeline (:class:`drakit.prepare.pipeline.DriverState`) runs over the plugin host of
``h200-8gpu-8ainic`` with the NVIDIA GPU, AINIC and composite backends under one driver; claims
come from an in-memory claim source. Nothing of drakit is mocked: the GPU backend prepares
through the simulated root's fake NVML, the AINIC backend through the simulated sysfs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import ClaimRef
from drakit.prepare.pipeline import DriverState
from drakit.sim import SysfsBuilder, get_profile
from drakit.testing import ClaimStore
from drakit_amd_ainic.sim import SriovKernel

DRIVER = "gpu-nic.example.com"


@dataclass
class Pipeline:
    host: PluginHost
    state: DriverState
    claims: ClaimStore
    cdi_dir: Path
    state_dir: Path

    def checkpoint(self) -> dict[str, Any]:
        path = self.state_dir / DRIVER / "checkpoint.json"
        return dict(json.loads(path.read_text())["claims"]) if path.exists() else {}


@contextmanager
def open_pipeline(host: PluginHost, tmp_path: Path) -> Iterator[Pipeline]:
    """The driver's prepare pipeline over ``host``, its state and CDI specs under ``tmp_path``."""
    claims = ClaimStore(copy=False)
    state = DriverState(
        DRIVER,
        host,
        claims,
        state_dir=tmp_path / "state",
        cdi_dir=tmp_path / "cdi",
        boot_id="test",
    )
    try:
        yield Pipeline(host, state, claims, tmp_path / "cdi", tmp_path / "state")
    finally:
        state.close()


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    plugins = {
        "nvidia_gpu": {"driver": DRIVER},
        "amd_ainic": {"driver": DRIVER},
        "composite": {"driver": DRIVER},
    }
    settings = DrakitSettings(
        profile="h200-8gpu-8ainic", plugins=plugins, state_dir=tmp_path / "state"
    )
    with open_host(settings) as host:
        host.discover()
        with open_pipeline(host, tmp_path) as p:
            yield p


def allocated(
    p: Pipeline, devices: list[str], config: list[dict[str, Any]] | None = None
) -> ClaimRef:
    uid = str(uuid.uuid4())
    name = f"c-{uid[:6]}"
    p.claims.add(
        {
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "spec": {},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "pairs",
                                "driver": DRIVER,
                                "pool": p.host.node.name,
                                "device": d,
                            }
                            for d in devices
                        ],
                        "config": [
                            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": c}}
                            for c in config or []
                        ],
                    }
                }
            },
        }
    )
    return ClaimRef(namespace="ns", name=name, uid=uid)


def members_of(p: Pipeline, pair: str) -> tuple[str, str]:
    found = p.host.discover()
    [dev] = [d for k, d in found.devices.items() if k.device == pair]
    return str(dev.attributes["gpu"].value), str(dev.attributes["nic"].value)


def test_a_pair_gets_the_gpus_and_the_nics_device_nodes_and_unprepare_undoes_both(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    gpu, nic = members_of(p, "pair-3")
    ref = allocated(p, ["pair-3"])
    assert p.state.prepare([ref])[ref.uid].error == ""
    [spec] = [json.loads(f.read_text()) for f in p.cdi_dir.glob(f"*{ref.uid}*.json")]
    [dev] = spec["devices"]
    nodes = [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
    minor = int(gpu.removeprefix("gpu-"))
    assert f"/dev/nvidia{minor}" in nodes  # what the GPU backend hands a lone GPU
    assert any(n.startswith("/dev/infiniband/uverbs") for n in nodes)  # the NIC backend's
    env = dev["containerEdits"]["env"]
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in env)
    assert any(e.startswith("DRAKIT_AINIC_") for e in env)
    assert (
        "DRAKIT_PAIR_3_GPU="
        + str(
            p.state.inventory.current.device(
                next(k for k in p.state.inventory.current.devices_of(DRIVER) if k.device == gpu)
            )
            .attributes["resource.kubernetes.io/pciBusID"]  # type: ignore[union-attr]
            .value
        )
        in env
    )
    # each member's result is on record under its own backend, as if claimed alone
    record = p.checkpoint()[ref.uid]["prepared"]
    assert [d["device"] for d in record["nvidia_gpu"]] == [gpu]
    assert [d["device"] for d in record["amd_ainic"]] == [nic]
    assert [d["device"] for d in record["composite"]] == ["pair-3"]
    # a lone claim for the member is refused while the pair holds it (the last line of defence)
    lone = allocated(p, [gpu])
    assert "is still prepared for claim" in p.state.prepare([lone])[lone.uid].error
    assert p.state.unprepare([ref])[ref.uid].error == ""
    assert ref.uid not in p.checkpoint()
    assert not list(p.cdi_dir.glob(f"*{ref.uid}*"))
    assert p.state.prepare([lone])[lone.uid].error == ""  # free again


def test_a_failing_nic_rolls_the_gpu_back(pipeline: Pipeline) -> None:
    p = pipeline
    bad = {"apiVersion": "ainic.drakit.io/v1alpha1", "kind": "NicConfig", "vf": {"vlan": 7}}
    ref = allocated(p, ["pair-1"], [bad])
    err = p.state.prepare([ref])[ref.uid].error
    assert "NicConfig vf: sets a VF, and this device is a whole PF" in err
    record = p.checkpoint()[ref.uid]["prepared"]
    assert record["nvidia_gpu"] == []  # prepared, then rolled back
    assert record["amd_ainic"] == []
    assert not list(p.cdi_dir.glob(f"*{ref.uid}*"))
    assert p.state.unprepare([ref])[ref.uid].error == ""
    assert ref.uid not in p.checkpoint()


def test_members_are_asked_only_inside_a_prepare(pipeline: Pipeline) -> None:
    composite = pipeline.host.contexts["composite"]
    with pytest.raises(Exception, match="outside its own prepare call"):
        composite.members.prepare("nvidia_gpu", None)  # type: ignore[arg-type]


def test_a_pair_with_a_shared_mode_nic_gets_a_vf_of_it_like_a_share(tmp_path: Path) -> None:
    spec = get_profile("h200-8gpu-8ainic")
    root = SysfsBuilder(spec).build(tmp_path / "root")
    pf = root / "sys/bus/pci/devices/0000:18:00.0"  # ainic-0, enp24s0
    plugins = {
        "nvidia_gpu": {"driver": DRIVER},
        "amd_ainic": {
            "driver": DRIVER,
            "nics": [{"select": {"pf_names": ["enp24s0"]}, "mode": "shared", "vf_limit": 4}],
        },
        "composite": {"driver": DRIVER},
    }
    settings = DrakitSettings(
        sysfs_root=root, node_name="n", plugins=plugins, state_dir=tmp_path / "state"
    )
    with SriovKernel(spec, root), open_host(settings) as host:
        found = host.discover()
        [pair] = [
            k.device
            for k, d in found.devices.items()
            if found.owners[k] == "composite" and d.attributes["nic"].value == "ainic-0"
        ]
        with open_pipeline(host, tmp_path) as p:
            ref = allocated(p, [pair])
            assert p.state.prepare([ref])[ref.uid].error == ""
            assert len(list(pf.resolve().glob("virtfn*"))) == 4  # created on demand
            [spec_file] = p.cdi_dir.glob(f"*{ref.uid}*.json")
            [dev] = json.loads(spec_file.read_text())["devices"]
            nodes = [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
            assert any(n.startswith("/dev/infiniband/uverbs") for n in nodes)
            assert any(n.startswith("/dev/nvidia") for n in nodes)
            [nic] = p.checkpoint()[ref.uid]["prepared"]["amd_ainic"]
            assert nic["device"] == "ainic-0"
            assert p.state.unprepare([ref])[ref.uid].error == ""
            assert ref.uid not in p.checkpoint()
            assert list(pf.resolve().glob("virtfn*")) == []  # the idle pool's VFs are removed


@pytest.mark.parametrize("damage", ["junk", "deleted"])
def test_a_damaged_checkpoint_keeps_a_prepared_pairs_members_held(
    pipeline: Pipeline, damage: str
) -> None:
    """Issue 30, class 1: after recovery from the CDI specs a pair still holds its GPU and NIC."""
    p = pipeline
    gpu, nic = members_of(p, "pair-3")
    ref = allocated(p, ["pair-3"])
    assert p.state.prepare([ref])[ref.uid].error == ""
    path = p.state_dir / DRIVER / "checkpoint.json"
    if damage == "junk":
        path.write_text("{ junk")
    else:
        path.unlink()
    for member in (gpu, nic):
        lone = allocated(p, [member])
        err = p.state.prepare([lone])[lone.uid].error
        assert f"device {member!r} is still prepared for claim with UID {ref.uid}" in err, err
        assert "recovered from its CDI spec" in err
        assert not list(p.cdi_dir.glob(f"*{lone.uid}*"))
    other = allocated(p, ["pair-4"])  # a pair of other members is served
    assert p.state.prepare([other])[other.uid].error == ""
    assert p.state.unprepare([ref])[ref.uid].error == ""
    lone = allocated(p, [gpu])  # the kubelet unprepared the pair: its GPU is free
    assert p.state.prepare([lone])[lone.uid].error == ""
