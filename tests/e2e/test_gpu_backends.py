"""GPU backends end to end: ``drakit node`` over simulated GPUs, the real scheduler, the kubelet.

One node process per module serves a DGX H100 tree whose GPU 0 is in MIG mode (the fake NVML
behind the backend's NVML seam) and publishes through the real API server:

* a claim for full GPU 0 and a claim for a MIG slice of it are never allocated together: the
  scheduler keeps the second pod pending while the first holds the GPU, and allocates it once
  the first claim is gone; preparing the slice creates the MIG instance and the CDI spec
  carries its capability nodes; unpreparing destroys it;
* a time-sliced claim shared by two pods is prepared once and both pods' containers get the
  same CDI device (the same device nodes);

and a second node serves ``mi300x-8gpu-8ainic``, whose 8 AMD GPUs are published and accepted
by the API server, and paired with the 8 AINICs by the composite backend under one driver.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    RESOURCE,
    NodeDirs,
    NodeProcess,
    Running,
    create_claim,
    create_pod,
    device_classes,
    kubelet_flags,
    running_node,
)

from drakit.sim import SysfsBuilder, fast_tmp, get_profile
from drakit_nvidia_gpu.sim import inject_xid, load_nvml_description, mig_instances, with_mig_enabled

pytestmark = pytest.mark.e2e

GPU = "gpu.nvidia.drakit.io"
AMD = "gpu.amd.drakit.io"


@pytest.fixture(scope="module")
def gpu_node(control_plane: ControlPlane) -> Iterator[Running]:
    spec = with_mig_enabled(get_profile("dgx-h100"), {0})
    root = Path(tempfile.mkdtemp(prefix="dk-gpu-", dir=fast_tmp()))
    SysfsBuilder(spec).build(root)
    nvml = load_nvml_description(root)
    plugins = {"nvidia_gpu": {"health_clear_after": 4}}
    try:
        with (
            device_classes(control_plane, "e2e", {"gpu": GPU}) as classes,
            running_node(
                control_plane,
                "gpu",
                plugins,
                sysfs_root=root,
                settings={"health": {"interval": 1}},
                ready_timeout=None,
                classes=classes,
            ) as node,
        ):
            node.facts["gpu0"] = nvml.devices[0].uuid
            yield node
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _claim(cp: ControlPlane, ns: str, name: str, cls: str, cel: str, config: Any = None) -> None:
    spec: dict[str, Any] = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": cls,
                        "selectors": [{"cel": {"expression": cel}}],
                    },
                }
            ]
        }
    }
    if config is not None:
        spec["devices"]["config"] = [
            {"requests": ["gpu"], "opaque": {"driver": GPU, "parameters": config}}
        ]
    create_claim(cp, ns, name, spec)


def _pod(cp: ControlPlane, ns: str, name: str, node: str, claim: str, containers: int = 1) -> None:
    create_pod(
        cp, ns, name, node, claim=claim, ref="g", containers=[f"c{i}" for i in range(containers)]
    )


def _bound(cp: ControlPlane, ns: str, pod: str) -> dict[str, Any] | None:
    p = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{pod}")
    return p if p["spec"].get("nodeName") else None


def _unschedulable(cp: ControlPlane, ns: str, pod: str) -> bool:
    p = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{pod}")
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in p.get("status", {}).get("conditions", [])
    )


def _delete(cp: ControlPlane, path: str) -> None:
    cp.api("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})


def _wait_published(cp: ControlPlane, node: str, driver: str, count: int) -> set[str]:
    def names() -> set[str] | None:
        items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")[
            "items"
        ]
        got = {
            d["name"]
            for s in items
            if s["spec"]["driver"] == driver
            for d in s["spec"].get("devices", [])
        }
        return got if len(got) == count else None

    result: set[str] = wait_for(names, timeout=60, what=f"{count} {driver} devices published")
    return result


def test_full_gpu_and_a_mig_slice_of_it_are_never_both_allocated(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, gpu_node: Running, namespace: str
) -> None:
    cp, n = control_plane, gpu_node
    published = _wait_published(cp, n.name, GPU, 8 + 25)
    assert "gpu-0-mig-7g80gb-0-0" in published
    attr = f'device.attributes["{GPU}"]'
    _claim(
        cp,
        namespace,
        "full",
        n.classes["gpu"],
        f'{attr}.type == "gpu" && {attr}.uuid == "{n.gpu0}"',
    )
    _claim(
        cp,
        namespace,
        "slice",
        n.classes["gpu"],
        f'{attr}.type == "mig" && {attr}.parentUUID == "{n.gpu0}" && {attr}.profile == "1g.10gb"',
    )
    _pod(cp, namespace, "full", n.name, "full")
    wait_for(lambda: _bound(cp, namespace, "full"), timeout=60, what="the full-GPU pod bound")
    _pod(cp, namespace, "slice", n.name, "slice")
    wait_for(
        lambda: _unschedulable(cp, namespace, "slice"), timeout=60, what="slice pod unschedulable"
    )
    claim = cp.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/slice")
    assert not claim.get("status", {}).get("allocation"), "never allocated beside the full GPU"

    _delete(cp, f"/api/v1/namespaces/{namespace}/pods/full")
    _delete(cp, f"{RESOURCE}/namespaces/{namespace}/resourceclaims/full")
    pod = wait_for(lambda: _bound(cp, namespace, "slice"), timeout=120, what="the slice pod bound")
    claim = cp.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/slice")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert re.fullmatch(r"gpu-0-mig-1g10gb-19-[0-6]", result["device"])

    flags = kubelet_flags(n.dirs, n.name, f"{namespace}/slice", drivers=[GPU])
    prepared = kubelet_standin.run("prepare", *flags)
    assert prepared.exit_code == 0, (prepared.doc, prepared.stderr[-3000:])
    uid = claim["metadata"]["uid"]
    [gi] = mig_instances(n.root)[n.gpu0]
    assert (gi["profile_id"], gi["start"]) == (19, int(result["device"].rsplit("-", 1)[1]))
    spec = n.dirs.cdi_specs()[f"k8s.{GPU}-claim_{uid}.json"]
    edits = spec["devices"][0]["containerEdits"]
    paths = [d["path"] for d in edits["deviceNodes"]]
    assert paths[:4] == [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert [p for p in paths if p.startswith("/dev/nvidia-caps/nvidia-cap")] == paths[4:]
    assert len(paths) == 6
    [visible] = [e for e in edits["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
    assert visible.startswith("NVIDIA_VISIBLE_DEVICES=MIG-")

    _delete(cp, f"/api/v1/namespaces/{namespace}/pods/slice")
    unprepared = kubelet_standin.run("unprepare", *flags, f"--pod-uid={pod['metadata']['uid']}")
    assert unprepared.exit_code == 0, (unprepared.doc, unprepared.stderr[-3000:])
    assert mig_instances(n.root)[n.gpu0] == []


def test_a_time_sliced_claim_shared_by_two_pods_is_prepared_once(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, gpu_node: Running, namespace: str
) -> None:
    cp, n = control_plane, gpu_node
    _wait_published(cp, n.name, GPU, 8 + 25)
    uuid3 = load_nvml_description(n.root).devices[3].uuid
    attr = f'device.attributes["{GPU}"]'
    config = {
        "apiVersion": "gpu.nvidia.drakit.io/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
    }
    _claim(
        cp,
        namespace,
        "shared",
        n.classes["gpu"],
        f'{attr}.type == "gpu" && {attr}.uuid == "{uuid3}"',
        config,
    )
    _pod(cp, namespace, "a", n.name, "shared", containers=2)
    _pod(cp, namespace, "b", n.name, "shared")
    wait_for(
        lambda: _bound(cp, namespace, "a") and _bound(cp, namespace, "b"),
        timeout=60,
        what="both pods bound",
    )
    uid = cp.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/shared")["metadata"][
        "uid"
    ]
    spec_path = n.dirs.cdi_dir / f"k8s.{GPU}-claim_{uid}.json"
    docs = []
    seen = []
    for pod in ("a", "b"):
        flags = kubelet_flags(n.dirs, n.name, f"{namespace}/{pod}", drivers=[GPU])
        res = kubelet_standin.run("prepare", *flags)
        assert res.exit_code == 0, (res.doc, res.stderr[-3000:])
        docs.append(res.doc)
        seen.append((spec_path.stat().st_mtime_ns, n.dirs.checkpoint(GPU)[uid]))
    # the second pod's prepare is answered from the checkpoint: the backend ran once, the
    # spec was written once
    assert seen[0] == seen[1]
    ids = [c["cdi_devices"] for doc in docs for c in doc["containers"].values()]
    assert len(ids) == 3
    assert all(i == ids[0] for i in ids)
    [dev] = json.loads(spec_path.read_text())["devices"]
    assert dev["containerEdits"]["deviceNodes"][0]["path"] == "/dev/nvidia3"
    assert f"NVIDIA_VISIBLE_DEVICES={uuid3}" in dev["containerEdits"]["env"]
    assert n.dirs.checkpoint(GPU)[uid]["phase"] == "PrepareCompleted"


def test_a_critical_xid_taints_the_gpu_in_its_slice_until_it_clears(
    control_plane: ControlPlane, gpu_node: Running
) -> None:
    cp, n = control_plane, gpu_node
    _wait_published(cp, n.name, GPU, 8 + 25)
    uuid5 = load_nvml_description(n.root).devices[5].uuid

    def taints() -> list[dict[str, Any]]:
        items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={n.name}")
        return [
            t
            for s in items["items"]
            for d in s["spec"].get("devices", [])
            if d["name"] == "gpu-5"
            for t in d.get("taints", [])
        ]

    assert taints() == []
    inject_xid(n.root, uuid5, 79)
    [taint] = wait_for(taints, timeout=60, what="the XID taint on gpu-5")
    assert (taint["key"], taint["value"], taint["effect"]) == (
        "gpu.nvidia.drakit.io/xid",
        "79",
        "NoSchedule",
    )
    wait_for(lambda: not taints(), timeout=60, what="the taint to clear")


def test_mi300x_publishes_eight_amd_gpus_the_api_server_accepts(
    control_plane: ControlPlane,
) -> None:
    name = f"mi-{uuidlib.uuid4().hex[:6]}"
    control_plane.create_node(name)
    dirs = NodeDirs.create("dk-mi-")
    proc = NodeProcess(
        kubeconfig=control_plane.kubeconfig,
        node_name=name,
        dirs=dirs,
        # the composite and its members publish under one driver (docs/composite.md)
        plugins={
            "amd_gpu": {"driver": AMD},
            "amd_ainic": {"driver": AMD},
            "composite": {"driver": AMD},
        },
        profile="mi300x-8gpu-8ainic",
        instance_id="mi",
    )
    try:
        with proc:
            names = _wait_published(control_plane, name, AMD, 8 + 8 + 8)
            assert len([x for x in names if x.startswith("gpu-0000-")]) == 8
            assert {x for x in names if x.startswith("pair-")} == {f"pair-{i}" for i in range(8)}
            proc.wait_ready(timeout=30)
            items = control_plane.api(
                "GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={name}"
            )["items"]
            [dev] = [
                d
                for s in items
                if s["spec"]["driver"] == AMD
                for d in s["spec"].get("devices") or []
                if d["name"] == min(x for x in names if x.startswith("gpu-0000-"))
            ]
            assert dev["attributes"]["productName"] == {"string": "AMD Instinct MI300X"}
            assert dev["capacity"]["memory"]["value"] in ("192Gi", str(192 * 2**30))
            # the GPU consumes its own counter set whole, as the pair holding it does
            [use] = dev["consumesCounters"]
            assert use["counterSet"] == f"{dev['name']}-counters"
    finally:
        control_plane.delete_node(name)
        dirs.remove()
