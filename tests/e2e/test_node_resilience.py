"""A node starts whatever one device, label or vendor library says (issue 30, class 3).

``drakit node`` on ``h200-8gpu-8ainic`` (CPU, NVIDIA and AINIC backends) whose Node carries a rail
label no rail can be (valid to the API server), one of whose GPUs fails an NVML query at
discovery, and whose NVML answers NotSupported when another GPU is registered for events
(the fake NVML's faults, in the simulated tree the process reads). It must start, serve every
backend, publish the rest, and name each problem: in its log, per item in the metric
``drakit_skipped_items{driver,kind,reason}``, and in a Warning Event on the Node per item.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import DRIVERS, RESOURCE, NodeDirs, NodeProcess

from drakit.sim import build_profile
from drakit_nvidia_gpu.sim import inject_nvml_fault, load_nvml_description

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
BAD_RAIL = "99999999999999999999"  # 20 digits: a valid label value, beyond any int64 rail


def published(cp: ControlPlane, node: str) -> dict[str, dict[str, Any]]:
    """Driver -> device name -> its attributes, as published for ``node``."""
    items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")
    out: dict[str, dict[str, Any]] = {}
    for s in items["items"]:
        for d in s["spec"].get("devices") or []:
            attrs = {k: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()}
            out.setdefault(s["spec"]["driver"], {})[d["name"]] = attrs
    return out


@pytest.fixture
def faulty_root(tmp_path: Path) -> tuple[Path, list[str]]:
    root = build_profile(PROFILE, tmp_path / "root")
    uuids = [g.uuid for g in load_nvml_description(root).devices]
    inject_nvml_fault(root, uuids[3], "nvmlDeviceGetMemoryInfo", "InsufficientResources")
    inject_nvml_fault(root, uuids[5], "nvmlDeviceRegisterEvents", "NotSupported")
    return root, uuids


def test_a_bad_label_a_failing_gpu_and_nvml_without_events_do_not_stop_the_node(
    control_plane: ControlPlane, faulty_root: tuple[Path, list[str]]
) -> None:
    cp = control_plane
    root, uuids = faulty_root
    name = f"resilient-{uuid.uuid4().hex[:6]}"
    cp.create_node(name, labels={"ainic.drakit.io/rail.enp24s0": BAD_RAIL})
    dirs = NodeDirs.create("dk-resil-")
    proc = NodeProcess(
        kubeconfig=cp.kubeconfig,
        node_name=name,
        dirs=dirs,
        plugins={"cpu": {}, "nvidia_gpu": {}, "amd_ainic": {}},
        sysfs_root=root,
        instance_id="resilient",
    )
    try:
        with proc:
            proc.wait_ready(timeout=90)  # every backend started: /readyz answers 200

            def everything() -> dict[str, dict[str, Any]] | None:
                got = published(cp, name)
                want = (DRIVERS["cpu"], DRIVERS["nvidia_gpu"], DRIVERS["amd_ainic"])
                return got if all(got.get(d) for d in want) else None

            got = wait_for(everything, timeout=60, what="every backend's slices")
            gpus = got[DRIVERS["nvidia_gpu"]]
            assert "gpu-3" not in gpus, "the GPU NVML refused is not published"
            assert {f"gpu-{i}" for i in range(8) if i != 3} <= set(gpus)
            nics = got[DRIVERS["amd_ainic"]]
            assert "rail" not in nics["ainic-0"], "the bad rail label is skipped"
            assert len(nics) == 8
            log = proc.log()
            assert "NVML GPU 3:" in log
            assert f"XID health watching is off for GPU {uuids[5]}" in log
            assert f"ainic.drakit.io/rail.enp24s0='{BAD_RAIL}'" in log

            # named per item: the metric, by driver, kind and a fixed reason word
            status, metrics = proc.http("/metrics")
            assert status == 200
            nvidia, ainic = DRIVERS["nvidia_gpu"], DRIVERS["amd_ainic"]
            for driver, kind, reason in (
                (nvidia, "device", "nvml-error"),
                (nvidia, "health", "not-supported"),
                (ainic, "label", "bad-value"),
            ):
                series = f'driver="{driver}",kind="{kind}",reason="{reason}"'
                assert f"drakit_skipped_items{{{series}}} 1.0" in metrics, metrics
            assert metrics.count("drakit_skipped_items{") == 3

            # ... and an Event on the Node for each
            def node_events() -> dict[str, str] | None:
                items = cp.api(
                    "GET",
                    f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={name}",
                )["items"]
                got = {
                    e["reason"]: e["message"]
                    for e in items
                    if e["involvedObject"]["kind"] == "Node"
                }
                want = {"DeviceSkipped", "HealthWatchingOff", "NodeLabelIgnored"}
                return got if want <= set(got) else None

            events = wait_for(node_events, timeout=30, what="a Node Event per skipped item")
            assert "device gpu3: NVML GPU 3:" in events["DeviceSkipped"]
            assert f"health {uuids[5]}: XID health watching is off" in events["HealthWatchingOff"]
            assert "label ainic.drakit.io/rail.enp24s0: " in events["NodeLabelIgnored"]
            assert "is not a rail" in events["NodeLabelIgnored"]
            assert proc.terminate() == 0
    finally:
        cp.delete_node(name)
        dirs.remove()
