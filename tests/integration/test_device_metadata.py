"""KEP-5304 device metadata files, written at prepare and mounted through the claim's CDI spec.

A GPU, a NIC and a CPU claim are prepared on the simulated ``h200-8gpu-8ainic`` node; each
request's file is read back from the host path its CDI mount names and compared with the
device's attributes in the ResourceSlices the node publishes. The real pipeline, backends,
checkpoint and CDI writer run (with the real control plane: tests/e2e/test_node_operators.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.claims import NODE, claim, make_state

from drakit.host.pluginhost import PluginHost
from drakit.prepare.metadata import (
    API_VERSIONS,
    CONTAINER_DIR,
    MetadataDevice,
    MetadataWriter,
    read_metadata,
)
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore

GPU = "gpu.nvidia.drakit.io"
CPU = "cpu.drakit.io"
AINIC = "ainic.amd.drakit.io"
ROOT = "/var/run/kubernetes.io/dra-device-attributes"


def result(driver: str, device: str, request: str, **more: Any) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": NODE, "device": device, **more}


def published(state: DriverState, device: str) -> dict[str, Any]:
    """The device's attributes in the slices this node publishes."""
    for s in state.inventory.current.slices():
        for d in s["spec"].get("devices", []):
            if s["spec"]["driver"] == state.driver and d["name"] == device:
                attrs: dict[str, Any] = d.get("attributes", {})
                return attrs
    raise AssertionError(f"{device} is not published")


def mounts(root: Path, driver: str, uid: str) -> dict[str, list[dict[str, Any]]]:
    """CDI device name -> its metadata mounts, from the claim's spec: the spec's own (what all
    its devices share) and the device's, as the runtime applies them."""
    spec = json.loads((root / "cdi" / f"k8s.{driver}-claim_{uid}.json").read_text())
    shared = (spec.get("containerEdits") or {}).get("mounts", [])
    return {
        d["name"]: [
            m
            for m in [*shared, *d["containerEdits"].get("mounts", [])]
            if m["containerPath"].startswith(CONTAINER_DIR)
        ]
        for d in spec["devices"]
    }


@pytest.mark.parametrize(
    ("driver", "results"),
    [
        (GPU, [result(GPU, "gpu-0", "gpu"), result(GPU, "gpu-1", "gpu")]),
        (AINIC, [result(AINIC, "ainic-2", "nic")]),
        (CPU, [result(CPU, "cpu-numa-1", "cpus", consumedCapacity={"cpu": "4"})]),
    ],
    ids=["gpu", "nic", "cpu"],
)
def test_metadata_read_back_equals_the_published_attributes(
    host: PluginHost,
    claims: ClaimStore,
    tmp_path: Path,
    driver: str,
    results: list[dict[str, Any]],
) -> None:
    state = make_state(host, claims, tmp_path, driver=driver)
    ref = claim(claims, results, name="work")
    assert state.prepare([ref])[ref.uid].error == ""
    request = results[0]["request"]
    inside = f"{ROOT}/resourceclaims/work/{request}/{driver}-metadata.json"
    by_device = mounts(tmp_path, driver, ref.uid)
    assert len(by_device) == len(results)
    host_paths = set()
    for got in by_device.values():
        [mount] = [m for m in got if m["containerPath"] == inside]
        assert mount["options"] == ["ro", "bind"]
        host_paths.add(mount["hostPath"])
    [host_path] = host_paths  # every device of the request mounts the request's one file
    path = Path(host_path)
    assert path.is_absolute()
    assert (
        path
        == tmp_path.absolute()
        / "state"
        / driver
        / "device-metadata"
        / ref.uid
        / (request)
        / "metadata.json"
    )
    assert path.stat().st_mode & 0o777 == 0o644
    docs = read_metadata(path.read_bytes())
    assert [d.api_version for d in docs] == list(API_VERSIONS)
    assert all(d.content() == docs[0].content() for d in docs)  # one content per version
    doc = docs[0]
    assert (doc.kind, doc.metadata.name, doc.metadata.namespace) == ("DeviceMetadata", "work", "ns")
    assert (doc.metadata.uid, doc.metadata.generation, doc.pod_claim_name) == (ref.uid, 1, None)
    [req] = doc.requests
    assert req.name == request
    assert [(d.driver, d.pool, d.name) for d in req.devices] == [
        (driver, NODE, r["device"]) for r in results
    ]
    for d in req.devices:
        assert d.attributes == published(state, d.name)
        assert d.attributes  # every backend publishes some

    # the raw file is what a Go consumer decodes: camelCase keys, no nulls
    first = json.JSONDecoder().raw_decode(path.read_text())[0]
    assert set(first) == {"apiVersion", "kind", "metadata", "requests"}

    assert state.unprepare([ref])[ref.uid].error == ""
    assert not (tmp_path / "state" / driver / "device-metadata" / ref.uid).exists()
    state.close()


def test_template_claims_subrequests_and_generations(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    ref = claim(claims, [result(GPU, "gpu-3", "gpu/big")], name="pod-gpu-x7k2p")
    claims.claims[("ns", ref.name)]["metadata"]["annotations"] = {
        "resource.kubernetes.io/pod-claim-name": "my-gpu"
    }
    assert state.prepare([ref])[ref.uid].error == ""
    [got] = mounts(tmp_path, GPU, ref.uid).values()
    [mount] = got
    # the pod's name for the claim, the top-level request only
    assert mount["containerPath"] == f"{ROOT}/resourceclaimtemplates/my-gpu/gpu/{GPU}-metadata.json"
    path = Path(mount["hostPath"])
    doc = read_metadata(path.read_bytes())[0]
    assert (doc.pod_claim_name, doc.requests[0].name) == ("my-gpu", "gpu/big")
    before = path.read_bytes()

    # a prepare repeated after a crash before the checkpoint: same content, same file
    again = make_state(host, claims, tmp_path)
    (tmp_path / "state" / GPU / "checkpoint.json").unlink()
    (tmp_path / "cdi" / f"k8s.{GPU}-claim_{ref.uid}.json").unlink()
    assert again.prepare([ref])[ref.uid].error == ""
    assert path.read_bytes() == before

    # other content (another device) is the next generation
    writer = MetadataWriter(path.parents[2], GPU)
    writer.write(
        namespace="ns",
        name=ref.name,
        uid=ref.uid,
        pod_claim_name="my-gpu",
        requests={"gpu/big": [MetadataDevice(driver=GPU, pool=NODE, name="gpu-4")]},
    )
    docs = read_metadata(path.read_bytes())
    assert {d.metadata.generation for d in docs} == {2}
    again.close()
    state.close()


def test_a_bad_pod_claim_name_fails_the_claim_naming_the_annotation(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    ref = claim(claims, [result(GPU, "gpu-5", "gpu")], name="odd")
    claims.claims[("ns", "odd")]["metadata"]["annotations"] = {
        "resource.kubernetes.io/pod-claim-name": "../../etc"
    }
    err = state.prepare([ref])[ref.uid].error
    assert "resource.kubernetes.io/pod-claim-name" in err
    assert "'../../etc'" in err
    assert not (tmp_path / "state" / GPU / "device-metadata" / ref.uid).exists()
    state.close()


def test_files_a_crash_left_behind_are_swept_and_held_ones_kept(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    kept = claim(claims, [result(GPU, "gpu-6", "gpu")], name="kept")
    assert state.prepare([kept])[kept.uid].error == ""
    state.close()
    meta = tmp_path / "state" / GPU / "device-metadata"
    # a crash after writing a claim's files, before its spec and record
    orphan = claim(claims, [result(GPU, "gpu-7", "gpu")], name="orphan")
    MetadataWriter(meta, GPU).write(
        namespace="ns", name="orphan", uid=orphan.uid, pod_claim_name=None, requests={"gpu": []}
    )
    assert (meta / orphan.uid).is_dir()

    restarted = make_state(host, claims, tmp_path)
    assert restarted.unprepare([claim(claims, [], name="other")])  # any call sweeps once
    assert sorted(p.name for p in meta.iterdir()) == [kept.uid]
    restarted.close()
