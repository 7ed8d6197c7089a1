"""MIG instances survive ``kill -9`` of ``drakit node`` at prepare and unprepare.

The node serves a DGX H100 tree with GPU 0 in MIG mode (the fake NVML keeps MIG instances in
the tree, as the hardware keeps them across a crash). The node is killed right after the
backend created (or destroyed) the MIG instance and before the checkpoint records it; the
kubelet stand-in's call fails; a restarted node answers the kubelet's retry, adopting the
instance instead of making a second one (or finding it already gone), and the claim ends with
no instance left.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    RESOURCE,
    NodeDirs,
    NodeProcess,
    create_claim,
    create_device_class,
    create_pod,
    kubelet_flags,
)

from drakit.sim import SysfsBuilder, fast_tmp, get_profile
from drakit_nvidia_gpu.sim import load_nvml_description, mig_instances, with_mig_enabled

pytestmark = pytest.mark.e2e

GPU = "gpu.nvidia.drakit.io"


@dataclass
class Tree:
    name: str
    root: Path
    gpu0: str
    device_class: str


@pytest.fixture(scope="module")
def tree(control_plane: ControlPlane) -> Iterator[Tree]:
    spec = with_mig_enabled(get_profile("dgx-h100"), {0})
    root = Path(tempfile.mkdtemp(prefix="dk-migc-", dir=fast_tmp()))
    SysfsBuilder(spec).build(root)
    nvml = load_nvml_description(root)
    name = f"migc-{uuidlib.uuid4().hex[:6]}"
    control_plane.create_node(name)
    device_class = f"e2e-migc-{uuidlib.uuid4().hex[:6]}"
    create_device_class(control_plane, device_class, GPU)
    try:
        yield Tree(name, root, nvml.devices[0].uuid, device_class)
    finally:
        control_plane.api("DELETE", f"{RESOURCE}/deviceclasses/{device_class}")
        control_plane.delete_node(name)
        shutil.rmtree(root, ignore_errors=True)


def _node(
    cp: ControlPlane, t: Tree, dirs: NodeDirs, env: dict[str, str] | None = None
) -> NodeProcess:
    return NodeProcess(
        kubeconfig=cp.kubeconfig,
        node_name=t.name,
        dirs=dirs,
        plugins={"nvidia_gpu": {"health_watch": False}},
        sysfs_root=t.root,
        instance_id="migc",
        env=env,
    )


def _pod_with_mig_claim(cp: ControlPlane, ns: str, t: Tree) -> dict[str, Any]:
    attr = f'device.attributes["{GPU}"]'
    cel = f'{attr}.type == "mig" && {attr}.parentUUID == "{t.gpu0}" && {attr}.profile == "2g.20gb"'
    exactly = {"deviceClassName": t.device_class, "selectors": [{"cel": {"expression": cel}}]}
    create_claim(cp, ns, "mig", {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}})
    create_pod(cp, ns, "p", t.name, claim="mig", ref="g")

    def bound() -> dict[str, Any] | None:
        pod = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/p")
        return pod if pod["spec"].get("nodeName") else None

    pod: dict[str, Any] = wait_for(bound, timeout=60, what="the MIG pod bound")
    return pod


@pytest.mark.parametrize("point", ["prepare-after-plugin", "unprepare-after-plugin"])
def test_a_crash_around_mig_create_or_destroy_leaves_exactly_the_right_instances(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    tree: Tree,
    namespace: str,
    point: str,
) -> None:
    cp, t = control_plane, tree
    dirs = NodeDirs.create("dk-migc-")
    try:
        flags = kubelet_flags(dirs, t.name, f"{namespace}/p", drivers=[GPU])
        preparing = point.startswith("prepare-")
        with _node(cp, t, dirs, {"DRAKIT_CRASH_AT": point}) as doomed:
            pod = _pod_with_mig_claim(cp, namespace, t)
            if not preparing:
                ok = kubelet_standin.run("prepare", *flags)
                assert ok.exit_code == 0, (ok.doc, ok.stderr[-2000:])
                assert len(mig_instances(t.root)[t.gpu0]) == 1
            unprep = [f"--pod-uid={pod['metadata']['uid']}"] if not preparing else []
            call = kubelet_standin.run("prepare" if preparing else "unprepare", *flags, *unprep)
            assert call.exit_code == 1, call.doc  # the plugin went away mid-call
            assert doomed.wait(timeout=30) == -signal.SIGKILL
        # what the hardware holds right after the kill
        after_kill = mig_instances(t.root)[t.gpu0]
        assert len(after_kill) == (1 if preparing else 0)

        with _node(cp, t, dirs) as proc:
            again = kubelet_standin.run("prepare" if preparing else "unprepare", *flags, *unprep)
            assert again.exit_code == 0, (again.doc, again.stderr[-2000:], proc.log_tail())
            if preparing:
                now = mig_instances(t.root)[t.gpu0]
                assert [gi["gi"] for gi in now] == [after_kill[0]["gi"]], "adopted, not remade"
                done = kubelet_standin.run(
                    "unprepare", *flags, f"--pod-uid={pod['metadata']['uid']}"
                )
                assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
            assert mig_instances(t.root)[t.gpu0] == []
    finally:
        dirs.remove()
