"""AINIC backend end to end: real scheduler, kubelet stand-in, ``drakit node`` subprocess.

One node on ``h200-8gpu-8ainic`` (8 H200 GPUs, 8 Pollara PFs, no VFs yet) with the AINIC and
GPU backends and mixed NIC modes:

* ``enp24s0`` (ainic-0) ``shared``: VFs created on demand (up to 4) when the first share is
  prepared, removed when the last is unprepared;
* ``enp64s0`` (ainic-1) ``vf``: four VFs the operator created before drakit started;
* the others ``pf``, with rails 1..3 two NICs each (ainic-2/3 rail 1, 4/5 rail 2, 6/7 rail 3).

The simulated SR-IOV kernel (:class:`drakit_amd_ainic.sim.SriovKernel`) runs in the test process
beside the tree, so ``sriov_numvfs`` writes from the node create VFs as on a real node.

Shown: (a) three pods share one PF through consumable capacity and a fourth that does not fit
stays Pending, each prepared pod with its own VF and uverbs device; (b) ``vf`` mode hands out
exclusive VFs; (c) a GPU+NIC claim with ``matchAttribute: pcieRoot`` gets the NIC under its GPU's
switch; (d) claims matching on ``rail`` get NICs of one rail; (e) a bad NicConfig fails only its
claim, naming the field; (f) a link flip marks the device Unhealthy and taints it, recovery
clears both.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeDirs,
    Running,
    bound_claim,
    create_claim_template,
    create_pod,
    device_classes,
    kubelet_flags,
    running_node,
)

from drakit.host.startup import fast_tmp
from drakit.sim import SysfsBuilder, get_profile
from drakit_amd_ainic.sim import SriovKernel, set_link

pytestmark = pytest.mark.e2e

NIC, GPU = DRIVERS["amd_ainic"], DRIVERS["nvidia_gpu"]
PROFILE = "h200-8gpu-8ainic"
SHARED_PF, VF_PF = "0000:18:00.0", "0000:40:00.0"
NIC_CONFIG = {"apiVersion": "ainic.drakit.io/v1alpha1", "kind": "NicConfig"}


def numvfs(root: Path, pf: str) -> int:
    return len(list((root / "sys/bus/pci/devices" / pf).resolve().glob("virtfn*")))


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[Running]:
    cp = control_plane
    dirs = NodeDirs.create("dk-nic-")
    spec = get_profile(PROFILE)
    plugins = {
        "amd_ainic": {
            "nics": [
                {"select": {"pf_names": ["enp24s0"]}, "mode": "shared", "vf_limit": 4},
                {"select": {"pci_addresses": [VF_PF]}, "mode": "vf"},
            ],
            "rails": {
                f"enp{b}s0": r
                for b, r in zip((79, 94, 154, 192, 206, 220), (1, 1, 2, 2, 3, 3), strict=True)
            },
            "fabric": "pod-a",
        },
        "nvidia_gpu": {},
    }
    with (
        device_classes(cp, "e2e", {"nic": NIC, "gpu": GPU}) as classes,
        tempfile.TemporaryDirectory(prefix="dk-nic-root-", dir=fast_tmp()) as tmp,
    ):
        root = SysfsBuilder(spec).build(Path(tmp) / "root")
        with SriovKernel(spec, root):
            (root / "sys/bus/pci/devices" / VF_PF / "sriov_numvfs").write_text("4\n")
            wait_for(lambda: numvfs(root, VF_PF) == 4, timeout=10, what="operator VFs")
            settings = {"health": {"interval": 0.5, "taint_unhealthy": True}}
            with running_node(
                cp,
                "nic",
                plugins,
                sysfs_root=root,
                settings=settings,
                dirs=dirs,
                ready_timeout=90,
                classes=classes,
            ) as node:
                yield node


def cel(expr: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expr}}]


def nic_request(
    node: Running,
    name: str = "nic",
    *,
    expr: str,
    count: int = 1,
    capacity: dict[str, str] | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": node.classes["nic"],
        "selectors": cel(expr),
        "count": count,
    }
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": exactly}


def make_pod(
    cp: ControlPlane,
    namespace: str,
    node: Running,
    pod: str,
    devices: dict[str, Any],
    *,
    wait: bool = True,
) -> dict[str, Any] | None:
    """A template + pod on the node; with ``wait``, the allocated claim once the pod is bound."""
    create_claim_template(cp, namespace, pod, devices)
    create_pod(cp, namespace, pod, node.name, template=pod)
    return bound_claim(cp, namespace, pod) if wait else None


def status_written(cp: ControlPlane, path: str) -> dict[str, Any] | None:
    """The claim once its ``status.devices`` is set."""
    claim = cp.api("GET", path)
    return claim if claim.get("status", {}).get("devices") else None


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = claim["status"]["allocation"]["devices"]["results"]
    return out


def kubelet(standin: KubeletStandIn, node: Running, verb: str, namespace: str, pod: str) -> Any:
    flags = kubelet_flags(node.dirs, node.name, f"{namespace}/{pod}", drivers=[NIC, GPU])
    return standin.run(verb, *flags)


def edits(node: Running, claim: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    spec = node.dirs.cdi_specs()[f"k8s.{NIC}-claim_{claim['metadata']['uid']}.json"]
    env: dict[str, str] = {}
    paths: list[str] = []
    for d in spec["devices"]:
        for e in d["containerEdits"].get("env", []):
            k, _, v = e.partition("=")
            env[k] = v
        paths += [n["path"] for n in d["containerEdits"].get("deviceNodes", [])]
    return env, paths


def test_a_three_pods_share_one_pf_a_fourth_stays_pending(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    cp = control_plane
    shared = f'device.attributes["{NIC}"].type == "shared"'
    pods = {"s1": "4", "s2": "4", "s3": "8"}
    claims = {
        p: make_pod(
            cp,
            namespace,
            node,
            p,
            {
                "requests": [
                    nic_request(node, expr=shared, capacity={"queues": q, "bandwidth": "50"})
                ]
            },
        )
        for p, q in pods.items()
    }
    for p, claim in claims.items():
        assert claim is not None
        [r] = results(claim)
        assert r["device"] == "ainic-0"
        assert r["consumedCapacity"]["queues"] == pods[p]
        assert r.get("shareID")
    make_pod(
        cp,
        namespace,
        node,
        "s4",
        {"requests": [nic_request(node, expr=shared, capacity={"queues": "4"})]},
        wait=False,
    )
    time.sleep(5)  # the scheduler has tried: 16 of 16 queues are taken
    s4 = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/s4")
    assert not s4["spec"].get("nodeName"), "the fourth share does not fit and stays Pending"
    assert numvfs(node.root, SHARED_PF) == 0
    try:
        for p in pods:
            done = kubelet(kubelet_standin, node, "prepare", namespace, p)
            assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        assert numvfs(node.root, SHARED_PF) == 4, "VFs created on demand"
        got = [edits(node, c) for c in claims.values() if c is not None]
        ifnames = {next(v for k, v in env.items() if k.endswith("_IFNAME")) for env, _ in got}
        uverbs = {paths[0] for _, paths in got}
        assert len(ifnames) == 3, ifnames
        assert all(i.startswith("enp24s0v") for i in ifnames)
        assert len(uverbs) == 3, "each container gets its own uverbs device"
        assert all("/dev/infiniband/rdma_cm" in paths for _, paths in got)
        for claim in claims.values():  # status.devices[].networkData, per share
            assert claim is not None
            meta = claim["metadata"]
            path = f"{RESOURCE}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"
            now = wait_for(
                functools.partial(status_written, cp, path),
                timeout=30,
                what="status.devices to be written",
            )
            [entry] = now["status"]["devices"]
            [r] = results(claim)
            assert (entry["device"], entry["shareID"]) == (r["device"], r["shareID"])
            assert entry["networkData"]["interfaceName"] in ifnames
            assert entry["networkData"]["hardwareAddress"].startswith("02:")
    finally:
        for p in pods:
            kubelet(kubelet_standin, node, "unprepare", namespace, p)
    assert numvfs(node.root, SHARED_PF) == 0, "on-demand VFs removed when the pool is idle"


def test_b_vf_mode_hands_out_exclusive_vfs(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    vf = f'device.attributes["{NIC}"].type == "vf"'
    claims = [
        make_pod(
            control_plane, namespace, node, f"v{i}", {"requests": [nic_request(node, expr=vf)]}
        )
        for i in range(4)
    ]
    devices = [results(c)[0]["device"] for c in claims if c is not None]
    assert sorted(devices) == [f"ainic-1-vf-{i}" for i in range(4)]
    make_pod(
        control_plane, namespace, node, "v4", {"requests": [nic_request(node, expr=vf)]}, wait=False
    )
    time.sleep(5)
    v4 = control_plane.api("GET", f"/api/v1/namespaces/{namespace}/pods/v4")
    assert not v4["spec"].get("nodeName"), "a fifth pod finds no free VF"
    try:
        for i in range(2):
            done = kubelet(kubelet_standin, node, "prepare", namespace, f"v{i}")
            assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        envs = [edits(node, c)[0] for c in claims[:2] if c is not None]
        assert len({e[k] for e in envs for k in e if k.endswith("_PCI")}) == 2
    finally:
        for i in range(2):
            kubelet(kubelet_standin, node, "unprepare", namespace, f"v{i}")


def test_c_gpu_and_nic_match_on_pcie_root(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    root_attr = "resource.kubernetes.io/pcieRoot"
    claim = make_pod(
        control_plane,
        namespace,
        node,
        "pair",
        {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": node.classes["gpu"],
                        "selectors": cel(
                            'device.attributes["resource.kubernetes.io"].pciBusID == "0000:9d:00.0"'
                        ),
                    },
                },
                nic_request(node, expr=f'device.attributes["{NIC}"].type == "pf"'),
            ],
            "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": root_attr}],
        },
    )
    assert claim is not None
    by_request = {r["request"]: r["device"] for r in results(claim)}
    assert by_request["nic"] == "ainic-4", by_request  # 0000:9a:00.0, the GPU's switch
    try:
        done = kubelet(kubelet_standin, node, "prepare", namespace, "pair")
        assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        env, _ = edits(node, claim)
        assert env["DRAKIT_AINIC_AINIC_4_PCI"] == "0000:9a:00.0"
    finally:
        kubelet(kubelet_standin, node, "unprepare", namespace, "pair")


def test_d_claims_matching_on_rail_get_nics_of_one_rail(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    rail = f"{NIC}/rail"
    pf = f'device.attributes["{NIC}"].type == "pf"'
    any_rail = make_pod(
        control_plane,
        namespace,
        node,
        "rail-any",
        {
            "requests": [nic_request(node, expr=pf, count=2)],
            "constraints": [{"requests": ["nic"], "matchAttribute": rail}],
        },
    )
    fixed = make_pod(
        control_plane,
        namespace,
        node,
        "rail-3",
        {
            "requests": [
                nic_request(node, expr=f'{pf} && device.attributes["{NIC}"].rail == 3', count=2)
            ]
        },
    )
    assert any_rail is not None
    assert fixed is not None
    rails = {f"ainic-{i}": r for i, r in zip(range(2, 8), (1, 1, 2, 2, 3, 3), strict=True)}
    got = sorted(r["device"] for r in results(any_rail))
    assert len({rails[d] for d in got}) == 1, got
    assert sorted(r["device"] for r in results(fixed)) == ["ainic-6", "ainic-7"]


def test_e_bad_nic_config_fails_only_its_claim(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    pf = f'device.attributes["{NIC}"].type == "pf"'

    def devices(cfg: dict[str, Any]) -> dict[str, Any]:
        return {
            "requests": [nic_request(node, expr=pf)],
            "config": [{"requests": ["nic"], "opaque": {"driver": NIC, "parameters": cfg}}],
        }

    make_pod(control_plane, namespace, node, "bad", devices({**NIC_CONFIG, "queues": 0}))
    good = make_pod(control_plane, namespace, node, "good", devices({**NIC_CONFIG, "queues": 8}))
    try:
        failed = kubelet(kubelet_standin, node, "prepare", namespace, "bad")
        assert failed.exit_code != 0
        text = str(failed.doc)
        assert "queues" in text
        assert "greater than or equal to 1" in text
        ok = kubelet(kubelet_standin, node, "prepare", namespace, "good")
        assert ok.exit_code == 0, (ok.doc, ok.stderr[-2000:])
        assert good is not None
        env, _ = edits(node, good)
        assert next(v for k, v in env.items() if k.endswith("_QUEUES")) == "0-7"
    finally:
        for p in ("bad", "good"):
            kubelet(kubelet_standin, node, "unprepare", namespace, p)


def slice_taints(cp: ControlPlane, node: str, device: str) -> list[dict[str, Any]]:
    slices = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")
    for s in slices["items"]:
        if s["spec"]["driver"] != NIC:
            continue
        for d in s["spec"].get("devices", []):
            if d["name"] == device:
                out: list[dict[str, Any]] = d.get("taints") or []
                return out
    raise AssertionError(f"{device} is not published")


def health_of(standin: KubeletStandIn, node: Running, device: str) -> str:
    got = standin.run(
        "raw-health",
        f"--endpoint={node.proc.dra_socket(NIC)}",
        "--service=v1",
        "--seconds=10",
        "--max-responses=1",
    )
    assert got.exit_code == 0, got.doc
    [first] = got.doc["responses"]
    return str(next(d["health"] for d in first["devices"] if d["device"]["device_name"] == device))


def test_f_link_flip_marks_unhealthy_and_taints_recovery_clears(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running
) -> None:
    cp = control_plane
    assert slice_taints(cp, node.name, "ainic-6") == []
    set_link(node.root, "enp206s0", up=False)
    try:
        wait_for(
            lambda: slice_taints(cp, node.name, "ainic-6") or None,
            timeout=30,
            what="the unhealthy taint on ainic-6",
        )
        [taint] = slice_taints(cp, node.name, "ainic-6")
        assert (taint["key"], taint["effect"]) == ("drakit.io/unhealthy", "NoSchedule")
        assert slice_taints(cp, node.name, "ainic-7") == []
        assert health_of(kubelet_standin, node, "ainic-6") == "UNHEALTHY"
    finally:
        set_link(node.root, "enp206s0", up=True)
    wait_for(
        lambda: not slice_taints(cp, node.name, "ainic-6") or None,
        timeout=30,
        what="the taint to clear",
    )
    assert health_of(kubelet_standin, node, "ainic-6") == "HEALTHY"
    assert os.path.exists(node.root / "sys/class/net/enp206s0")
