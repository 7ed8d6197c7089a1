"""What an operator meets first, end to end: admin access and device metadata files.

One ``drakit node`` serves the simulated ``h200-8gpu-8ainic`` node (CPU, NVIDIA GPU and AINIC
backends) through the real API server; the real scheduler allocates, the kubelet stand-in (the
kubelet's own DRA manager) prepares through drakit's sockets:

* a monitoring pod's claim with ``adminAccess`` (in a namespace labelled
  ``resource.kubernetes.io/admin-access: "true"``) is allocated the GPU a workload's claim holds,
  and the node prepares it beside the workload's: its CDI spec has the GPU's device nodes, the
  workload's record and spec are untouched; a node restart keeps both; unpreparing either
  leaves the other;
* the KEP-5304 metadata file of a prepared GPU, NIC and CPU claim (made from a pod's template:
  under ``resourceclaimtemplates/<pod's claim name>/``), read from the host path its CDI mount
  names, equals the attributes the node published for the device.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, fresh_namespace
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeProcess,
    Running,
    bound_claim,
    create_claim_template,
    create_pod,
    device_classes,
    kubelet_flags,
    running_node,
)

from drakit.prepare.metadata import API_VERSIONS, read_metadata

pytestmark = pytest.mark.e2e

GPU, CPU, NIC = DRIVERS["nvidia_gpu"], DRIVERS["cpu"], DRIVERS["amd_ainic"]
PROFILE = "h200-8gpu-8ainic"
PLUGINS = {"cpu": {"reserved": "0-1"}, "nvidia_gpu": {}, "amd_ainic": {}}
ROOT = "/var/run/kubernetes.io/dra-device-attributes"


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[Running]:
    with (
        device_classes(control_plane, "ops", {"gpu": GPU, "cpu": CPU, "nic": NIC}) as classes,
        running_node(
            control_plane,
            "ops",
            PLUGINS,
            profile=PROFILE,
            classes=classes,
            settings={"device_metadata": True},
        ) as node,
    ):
        try:
            yield node
        finally:
            node.proc.close()  # the process a restart started (running_node stops the first)


@pytest.fixture
def admin_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace where claims may ask for adminAccess."""
    labels = {"resource.kubernetes.io/admin-access": "true"}
    with fresh_namespace(control_plane, "e2e-admin", labels) as name:
        yield name


def published(cp: ControlPlane, node: str, driver: str) -> dict[str, dict[str, Any]]:
    """Device name -> its attributes, as the node's ResourceSlices carry them."""
    items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
    return {
        d["name"]: d.get("attributes", {})
        for s in items
        if s["spec"]["driver"] == driver
        for d in s["spec"].get("devices", [])
    }


def request(cls: str, cel: str, **more: Any) -> dict[str, Any]:
    exactly = {"deviceClassName": cls, "selectors": [{"cel": {"expression": cel}}], **more}
    return {"name": "dev", "exactly": exactly}


def run(cp: ControlPlane, ns: str, node: Running, pod: str, req: dict[str, Any]) -> dict[str, Any]:
    """A claim template with one request and a pod naming the claim ``dev``; its claim, bound."""
    create_claim_template(cp, ns, pod, {"requests": [req]})
    create_pod(cp, ns, pod, node.name, template=pod, ref="dev")
    return bound_claim(cp, ns, pod)


def call(standin: KubeletStandIn, node: Running, ns: str, pod: str, op: str, driver: str) -> None:
    flags = kubelet_flags(node.dirs, node.name, f"{ns}/{pod}", drivers=[driver])
    res = standin.run(op, *flags)
    assert res.exit_code == 0, (op, pod, res.doc, res.stderr[-3000:])


def spec(node: Running, driver: str, uid: str) -> dict[str, Any]:
    specs: dict[str, dict[str, Any]] = node.dirs.cdi_specs()
    return specs[f"k8s.{driver}-claim_{uid}.json"]


def restart(node: Running) -> None:
    """Stop the node's process and start another over the same directories."""
    assert node.proc.terminate() == 0
    proc = NodeProcess(
        kubeconfig=node.proc.kubeconfig,
        node_name=node.name,
        dirs=node.dirs,
        plugins=PLUGINS,
        profile=PROFILE,
        instance_id=node.proc.instance_id,
        name="restarted",
        settings={"device_metadata": True},
    )
    proc.start()
    proc.wait_ready(timeout=60)
    node.proc = proc


def test_admin_claim_on_a_held_gpu_prepares_beside_the_workload(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    node: Running,
    admin_namespace: str,
) -> None:
    cp, ns = control_plane, admin_namespace
    attr = f'device.attributes["{GPU}"]'
    work = run(cp, ns, node, "work", request(node.classes["gpu"], f'{attr}.type == "gpu"'))
    [held] = work["status"]["allocation"]["devices"]["results"]
    gpu_uuid = published(cp, node.name, GPU)[held["device"]]["uuid"]["string"]
    admin = run(
        cp,
        ns,
        node,
        "monitor",
        request(node.classes["gpu"], f'{attr}.uuid == "{gpu_uuid}"', adminAccess=True),
    )
    [watched] = admin["status"]["allocation"]["devices"]["results"]
    assert (watched["device"], watched.get("adminAccess")) == (held["device"], True)

    call(kubelet_standin, node, ns, "work", "prepare", GPU)
    work_uid, admin_uid = work["metadata"]["uid"], admin["metadata"]["uid"]
    work_record = node.dirs.checkpoint(GPU)[work_uid]
    work_spec = spec(node, GPU, work_uid)
    call(kubelet_standin, node, ns, "monitor", "prepare", GPU)

    def device_nodes(uid: str) -> list[str]:
        edits = spec(node, GPU, uid)["devices"][0]["containerEdits"]
        return [d["path"] for d in edits["deviceNodes"]]

    # the monitoring pod gets the GPU's device nodes, the same as the workload's
    assert device_nodes(admin_uid) == device_nodes(work_uid)
    assert device_nodes(admin_uid)[0].startswith("/dev/nvidia")
    assert "/dev/nvidiactl" in device_nodes(admin_uid)
    assert node.dirs.checkpoint(GPU)[work_uid] == work_record
    assert spec(node, GPU, work_uid) == work_spec

    restart(node)  # a new process over the same checkpoint and specs
    assert node.dirs.checkpoint(GPU)[work_uid] == work_record
    call(kubelet_standin, node, ns, "monitor", "prepare", GPU)  # the kubelet repeats: no clash

    call(kubelet_standin, node, ns, "monitor", "unprepare", GPU)
    assert node.dirs.checkpoint(GPU) == {work_uid: work_record}
    assert spec(node, GPU, work_uid) == work_spec

    call(kubelet_standin, node, ns, "work", "unprepare", GPU)
    assert node.dirs.checkpoint(GPU) == {}


@pytest.mark.parametrize(
    ("key", "driver", "cel", "more"),
    [
        ("gpu", GPU, f'device.attributes["{GPU}"].type == "gpu"', {}),
        ("nic", NIC, "true", {}),
        ("cpu", CPU, "true", {"capacity": {"requests": {"cpu": "4"}}}),
    ],
    ids=["gpu", "nic", "cpu"],
)
def test_device_metadata_read_back_equals_the_published_attributes(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    node: Running,
    namespace: str,
    key: str,
    driver: str,
    cel: str,
    more: dict[str, Any],
) -> None:
    cp, ns = control_plane, namespace
    claim = run(cp, ns, node, "meta", request(node.classes[key], cel, **more))
    call(kubelet_standin, node, ns, "meta", "prepare", driver)
    uid = claim["metadata"]["uid"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    [dev] = spec(node, driver, uid)["devices"]
    [mount] = [
        m
        for m in dev["containerEdits"]["mounts"]
        if m["containerPath"] == f"{ROOT}/resourceclaimtemplates/dev/dev/{driver}-metadata.json"
    ]
    assert mount["options"] == ["ro", "bind"]
    path = Path(mount["hostPath"])
    assert path.is_relative_to(node.dirs.state_dir)
    docs = read_metadata(path.read_bytes())
    assert [d.api_version for d in docs] == list(API_VERSIONS)
    assert (docs[0].pod_claim_name, docs[0].metadata.name) == ("dev", claim["metadata"]["name"])
    [req] = docs[0].requests
    [got] = req.devices
    assert (req.name, got.driver, got.pool, got.name) == (
        "dev",
        driver,
        node.name,
        result["device"],
    )
    assert got.attributes == published(cp, node.name, driver)[result["device"]]
    assert json.loads(json.dumps(got.attributes))  # plain JSON, as a container reads it

    call(kubelet_standin, node, ns, "meta", "unprepare", driver)
    assert not path.exists()
    assert not path.parents[1].exists()
