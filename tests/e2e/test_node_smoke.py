"""Smoke: `drakit node --profile h200-8gpu-8ainic` with the real control plane and kubelet code.

One ``drakit node`` subprocess serves the module. It publishes ResourceSlices for the CPU, GPU
and NIC drivers (exactly what discovery finds; the composite, whose pairs share their members'
driver, is ``test_composite_pairs.py``'s); a Pod with a ResourceClaimTemplate is scheduled by the
real kube-scheduler (claim made by the real resourceclaim controller); the kubelet stand-in's
DRA manager prepares it through drakit's sockets; the CDI specs on disk name exactly the
allocated devices and the kubelet's per-container CDI IDs match them; deleting the pod and
unpreparing removes the specs and the checkpoint entries, and the real controller releases the
claim. The stand-in's raw subcommands check every drakit reply for protobuf fields the published
kubelet clients do not know (a wrong field number fails them).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    Running,
    allocated_claim,
    create_claim_template,
    device_classes,
    kubelet_flags,
    published,
    running_node,
)

from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.prepare.cdi import cdi_kind

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
# three backends under three drivers; the composite would share the GPU and NIC driver
SMOKE = {n: DRIVERS[n] for n in ("cpu", "nvidia_gpu", "amd_ainic")}
PLUGINS: dict[str, dict[str, Any]] = {name: {} for name in SMOKE}
CPU, GPU, NIC = (SMOKE[n] for n in ("cpu", "nvidia_gpu", "amd_ainic"))


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[Running]:
    with running_node(control_plane, "smoke", PLUGINS, profile=PROFILE, ready_timeout=None) as node:
        yield node


@pytest.fixture(scope="module")
def classes(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    """One DeviceClass per driver: backend name -> class name."""
    with device_classes(control_plane, "smoke", SMOKE) as made:
        yield made


def test_slices_for_all_three_drivers_equal_discovery(
    control_plane: ControlPlane, node: Running
) -> None:
    settings = DrakitSettings(profile=PROFILE, node_name=node.name, plugins=PLUGINS)
    with open_host(settings) as host:
        expected: dict[str, set[str]] = {}
        for spec in build_inventory(host).pools:
            expected.setdefault(spec.driver, set()).update(d.name for d in spec.devices)
    assert set(expected) == set(SMOKE.values())
    got = wait_for(
        lambda: (p := published(control_plane, node.name)) == expected and p,
        timeout=30,
        what="slices of all three drivers",
    )
    assert got == expected
    assert len(got[GPU]) == 8
    assert node.proc.wait_ready(timeout=10) >= 0


def test_pod_is_prepared_and_released_through_the_kubelets_dra_manager(  # noqa: PLR0915
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    node: Running,
    classes: dict[str, str],
    namespace: str,
) -> None:
    cp = control_plane
    train = {
        "requests": [
            {"name": "gpu", "exactly": {"deviceClassName": classes["nvidia_gpu"]}},
            {"name": "nic", "exactly": {"deviceClassName": classes["amd_ainic"]}},
            {
                "name": "cpus",
                "exactly": {
                    "deviceClassName": classes["cpu"],
                    "capacity": {"requests": {"cpu": "4"}},
                },
            },
        ]
    }
    create_claim_template(cp, namespace, "train", train)
    cp.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "containers": [
                    {
                        "name": "train",
                        "image": "x.invalid/x",
                        "resources": {"claims": [{"name": "dev"}]},
                    },
                    {
                        "name": "side",
                        "image": "x.invalid/x",
                        "resources": {"claims": [{"name": "dev", "request": "nic"}]},
                    },
                    {"name": "plain", "image": "x.invalid/x"},
                ],
                "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "train"}],
            },
        },
    )
    pod_path = f"/api/v1/namespaces/{namespace}/pods/trainer"

    def bound() -> dict[str, Any] | None:
        pod = cp.api("GET", pod_path)
        statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
        return pod if pod["spec"].get("nodeName") and statuses else None

    pod = wait_for(bound, timeout=60, what="the scheduler to bind the pod")
    assert pod["spec"]["nodeName"] == node.name
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim_path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim_name}"
    claim = cp.api("GET", claim_path)
    uid = claim["metadata"]["uid"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["driver"] for r in results} == set(SMOKE.values())

    flags = kubelet_flags(node.dirs, node.name, f"{namespace}/trainer", drivers=node.proc.drivers)
    prepared = kubelet_standin.run("prepare", *flags)
    assert prepared.exit_code == 0, (prepared.doc, prepared.stderr[-3000:])

    # The CDI spec of each driver names exactly that driver's allocated devices.
    specs = node.dirs.cdi_specs()
    mine = {n: s for n, s in specs.items() if uid in n}
    assert len(mine) == len(SMOKE)
    all_ids: set[str] = set()
    by_request: dict[str, set[str]] = {}
    for r in results:
        driver = r["driver"]
        spec = mine.pop(f"k8s.{driver}-claim_{uid}.json")
        assert spec["kind"] == cdi_kind(driver)
        share = f"-{r['shareID']}" if r.get("shareID") else ""
        want_name = f"{uid}-{r['device']}{share}"
        assert [d["name"] for d in spec["devices"]] == [want_name]
        cdi_id = f"{cdi_kind(driver)}={want_name}"
        all_ids.add(cdi_id)
        by_request.setdefault(r["request"], set()).add(cdi_id)
    assert not mine

    # ... and the kubelet hands the runtime exactly those IDs, per container.
    containers = prepared.doc["containers"]
    assert set(containers["train"]["cdi_devices"]) == all_ids
    assert len(containers["train"]["cdi_devices"]) == len(all_ids)
    assert containers["side"]["cdi_devices"] == sorted(by_request["nic"])
    assert containers["plain"]["cdi_devices"] == []
    [info] = containers["train"]["claims"]
    assert (info["uid"], info["name"]) == (uid, claim_name)
    for r in results:
        [dev] = info["drivers"][r["driver"]]["devices"]
        assert (dev["pool"], dev["device"], dev["request_names"]) == (
            r["pool"],
            r["device"],
            [r["request"]],
        )
        assert dev["share_id"] == r.get("shareID")
        assert dev["cdi_device_ids"] == sorted(by_request[r["request"]])
    for driver in SMOKE.values():
        assert node.dirs.checkpoint(driver)[uid]["phase"] == "PrepareCompleted"

    # Delete the pod; the kubelet unprepares from its checkpoint (the pod object is gone).
    pod_uid = pod["metadata"]["uid"]
    cp.api(
        "DELETE", pod_path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    )
    unprepared = kubelet_standin.run("unprepare", *flags, f"--pod-uid={pod_uid}")
    assert unprepared.exit_code == 0, (unprepared.doc, unprepared.stderr[-3000:])
    assert unprepared.doc["unprepared"] is True
    assert not [n for n in node.dirs.cdi_files() if uid in n]
    for driver in SMOKE.values():
        assert uid not in node.dirs.checkpoint(driver)

    def released() -> bool:
        status, body = cp._http("GET", cp.server + claim_path)
        if status == 404:
            return True
        return not json.loads(body).get("status", {}).get("allocation")

    wait_for(released, timeout=60, what="the resourceclaim controller to release the claim")


def test_raw_wire_replies_have_no_unknown_fields(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    node: Running,
    classes: dict[str, str],
    namespace: str,
) -> None:
    # GetInfo on every registration socket: v1 first, the kubelet would pick it.
    for driver in node.proc.drivers:
        info = kubelet_standin.run(
            "raw-getinfo", f"--socket={node.proc.registration_socket(driver)}", "--notify=auto"
        )
        assert info.exit_code == 0, info.doc
        assert info.doc["unknown_fields"] == []
        assert info.doc["info"]["name"] == driver
        assert info.doc["info"]["endpoint"] == str(node.proc.dra_socket(driver))
        assert info.doc["info"]["supported_versions"][0] == "v1.DRAPlugin"
        assert info.doc["chosen_service"] == "v1.DRAPlugin"
        assert info.doc["health_service"] == "v1.DRAResourceHealth"
        assert info.doc["validation_error"] == ""

    # A claim on a shared CPU device: the v1 reply carries every Device field, share_id too.
    share = str(uuid.uuid4())
    claim = allocated_claim(
        control_plane,
        namespace,
        "raw",
        [
            {
                "request": "cpus",
                "driver": CPU,
                "pool": node.name,
                "device": "cpu-numa-1",
                "shareID": share,
                "consumedCapacity": {"cpu": "2"},
            }
        ],
        device_class=classes["cpu"],
    )
    ref = f"--claim={namespace}/raw/{claim['metadata']['uid']}"
    endpoint = f"--endpoint={node.proc.dra_socket(CPU)}"
    for service in ("v1", "v1beta1"):
        got = kubelet_standin.run("raw-prepare", endpoint, f"--service={service}", ref)
        assert got.exit_code == 0, got.doc
        assert got.doc["unknown_fields"] == []
        [entry] = got.doc["response"]["claims"].values()
        assert entry["error"] == ""
        [dev] = entry["devices"]
        assert (dev["pool_name"], dev["device_name"], dev["request_names"]) == (
            node.name,
            "cpu-numa-1",
            ["cpus"],
        )
        assert dev["cdi_device_ids"] == [
            f"{cdi_kind(CPU)}={claim['metadata']['uid']}-cpu-numa-1-{share}"
        ]
        if service == "v1":
            assert dev["share_id"] == share
        else:
            assert "share_id" not in dev  # v1beta1 has no such field
    for service in ("v1", "v1beta1"):
        got = kubelet_standin.run("raw-unprepare", endpoint, f"--service={service}", ref)
        assert got.exit_code == 0, got.doc
        assert got.doc["unknown_fields"] == []
        assert [e["error"] for e in got.doc["response"]["claims"].values()] == [""]
    assert claim["metadata"]["uid"] not in node.dirs.checkpoint(CPU)

    # The health stream, both versions: one full list of the GPUs, no unknown fields.
    gpus = published(control_plane, node.name)[GPU]
    for service in ("v1alpha1", "v1"):
        health = kubelet_standin.run(
            "raw-health",
            f"--endpoint={node.proc.dra_socket(GPU)}",
            f"--service={service}",
            "--seconds=10",
            "--max-responses=1",
        )
        assert health.exit_code == 0, health.doc
        assert health.doc["unknown_fields"] == []
        [first] = health.doc["responses"]
        assert {d["device"]["device_name"] for d in first["devices"]} == gpus
        assert {d["health"] for d in first["devices"]} == {"HEALTHY"}
