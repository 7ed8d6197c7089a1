"""AINIC shares survive ``kill -9``: restart, unprepare, and no VF is assigned or left behind.

One node on ``h200-8gpu-8ainic`` with ainic-0 in ``shared`` mode: its VFs are created on demand
(the simulated SR-IOV kernel runs beside the tree in the test process). For each crash point of
:data:`drakit.prepare.faults.CRASH_POINTS` and each step of the VF share's own prepare
(:data:`drakit_amd_ainic.prepare.CRASH_POINTS`: pool recorded, VFs created, choice recorded, VF
settings applied) the node runs with ``DRAKIT_CRASH_AT`` set, the kubelet
stand-in prepares a scheduled pod's share (and, for the unprepare points, unprepares it), the
node dies with SIGKILL inside the call, is restarted without the variable, and the kubelet
unprepares the claim. Afterwards the PF has no VFs (the on-demand pool is gone), the VF ledger
holds nothing, and the VF the share had got is reset.
"""

from __future__ import annotations

import json
import signal
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, StandInResult, wait_for
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeDirs,
    NodeProcess,
    create_claim_template,
    create_device_class,
    create_pod,
    kubelet_flags,
)

from drakit.host.startup import fast_tmp
from drakit.prepare.faults import CRASH_POINTS
from drakit.sim import SysfsBuilder, get_profile
from drakit_amd_ainic.prepare import CRASH_POINTS as VF_STEPS
from drakit_amd_ainic.sim import SriovKernel, vf_settings

pytestmark = pytest.mark.e2e

NIC = DRIVERS["amd_ainic"]
PROFILE = "h200-8gpu-8ainic"
PF = "0000:18:00.0"


@dataclass
class Env:
    cp: ControlPlane
    standin: KubeletStandIn
    node: str
    namespace: str
    dirs: NodeDirs
    root: Path

    @property
    def ledger(self) -> Path:
        return self.dirs.state_dir / "plugin_state" / "amd_ainic" / "vf-ledger.json"

    def process(self, name: str, env: dict[str, str] | None = None) -> NodeProcess:
        return NodeProcess(
            kubeconfig=self.cp.kubeconfig,
            node_name=self.node,
            dirs=self.dirs,
            plugins={
                "amd_ainic": {
                    "nics": [
                        {"select": {"pf_names": ["enp24s0"]}, "mode": "shared", "vf_limit": 2}
                    ],
                }
            },
            sysfs_root=self.root,
            instance_id="nic-crash",
            env=env,
            name=name,
        )

    def kubelet(self, op: str, state: str) -> StandInResult:
        flags = kubelet_flags(self.dirs, self.node, f"{self.namespace}/victim", state=state)
        return self.standin.run(op, *flags, f"--driver={NIC}")

    def numvfs(self) -> int:
        return len(list((self.root / "sys/bus/pci/devices" / PF).resolve().glob("virtfn*")))

    def assignments(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        out: list[dict[str, Any]] = json.loads(self.ledger.read_text())["data"]["assignments"]
        return out


@pytest.fixture(scope="module")
def env(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, request: pytest.FixtureRequest
) -> Iterator[Env]:
    cp = control_plane
    node = f"nic-crash-{uuid.uuid4().hex[:6]}"
    namespace = f"nic-crash-{uuid.uuid4().hex[:6]}"
    cls = f"nic-crash-{uuid.uuid4().hex[:6]}"
    cp.create_node(node)
    cp.create_namespace(namespace)
    create_device_class(cp, cls, NIC)
    dirs = NodeDirs.create("dk-nicc-")
    spec = get_profile(PROFILE)
    with tempfile.TemporaryDirectory(prefix="dk-nicc-root-", dir=fast_tmp()) as tmp:
        root = SysfsBuilder(spec).build(Path(tmp) / "root")
        try:
            with SriovKernel(spec, root):
                exactly = {"deviceClassName": cls, "capacity": {"requests": {"bandwidth": "40"}}}
                share = {"requests": [{"name": "nic", "exactly": exactly}]}
                create_claim_template(cp, namespace, "share", share)
                e = Env(cp, kubelet_standin, node, namespace, dirs, root)
                with e.process("setup") as proc:
                    proc.wait_ready(timeout=90)
                    create_pod(
                        cp,
                        namespace,
                        "victim",
                        node,
                        template="share",
                        ref="d",
                        containers=("main",),
                    )

                    def bound() -> bool:
                        pod = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/victim")
                        return bool(
                            pod["spec"].get("nodeName")
                            and pod.get("status", {}).get("resourceClaimStatuses")
                        )

                    wait_for(bound, timeout=60, what="the victim pod to be scheduled")
                    assert proc.terminate() == 0
                yield e
        finally:
            cp.delete_node(node)
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{cls}")
            cp.api("DELETE", f"/api/v1/namespaces/{namespace}")
            dirs.remove()


@pytest.mark.parametrize("point", [*CRASH_POINTS, *VF_STEPS])
def test_killed_then_restarted_and_unprepared_leaves_no_vf(env: Env, point: str) -> None:
    state = f"k-{point}"
    preparing = not point.startswith("unprepare-")
    with env.process(f"{point}-crash", {"DRAKIT_CRASH_AT": point}) as doomed:
        if not preparing:
            ok = env.kubelet("prepare", state)
            assert ok.exit_code == 0, (ok.doc, ok.stderr[-2000:])
        call = env.kubelet("prepare" if preparing else "unprepare", state)
        assert call.exit_code == 1, call.doc
        assert doomed.wait(timeout=30) == -signal.SIGKILL
    touched = env.numvfs() > 0
    with env.process(f"{point}-restart") as proc:
        done = env.kubelet("unprepare", state)
        assert done.exit_code == 0, (done.doc, done.stderr[-2000:], proc.log_tail())
        assert env.assignments() == [], point
        assert env.numvfs() == 0, f"{point}: on-demand VFs left behind"
        assert proc.terminate() == 0
    if touched:
        for vf, settings in vf_settings(env.root, PF).items():
            assert settings.get("max_tx_rate_mbps") == 0, (point, vf, settings)


def _vfs(env: Env) -> dict[str, tuple[str, int]]:
    """Claim UID -> (PF, VF) of its share, from the checkpoint."""
    out = {}
    for uid, rec in env.dirs.checkpoint(NIC).items():
        for p in rec["prepared"].get("amd_ainic", []):
            if "vf" in p["state"]:
                out[uid] = (p["state"]["pf"], p["state"]["vf"])
    return out


def test_the_ledger_deleted_while_a_share_runs_never_hands_its_vf_out_again(env: Env) -> None:
    """Issue 30, class 1: the VF ledger is rebuilt from the checkpoint after a restart."""
    cp, ns = env.cp, env.namespace
    with env.process("ledger-first") as proc:
        first = env.kubelet("prepare", "ledger")
        assert first.exit_code == 0, (first.doc, first.stderr[-2000:])
        assert proc.terminate() == 0
    held = _vfs(env)
    assert len(held) == 1
    env.ledger.unlink()  # what an operator might do, or a disk might lose
    create_pod(cp, ns, "second", env.node, template="share", ref="d", containers=("main",))

    def bound() -> bool:
        pod = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/second")
        return bool(
            pod["spec"].get("nodeName") and pod.get("status", {}).get("resourceClaimStatuses")
        )

    wait_for(bound, timeout=60, what="the second pod to be scheduled")
    second = kubelet_flags(env.dirs, env.node, f"{ns}/second", state="ledger-2")
    with env.process("ledger-restart") as proc:
        res = env.standin.run("prepare", *second, f"--driver={NIC}")
        assert res.exit_code == 0, (res.doc, res.stderr[-2000:], proc.log_tail())
        now = _vfs(env)
        assert len(now) == 2
        assert len(set(now.values())) == 2, f"one VF handed to two shares: {now}"
        assert {a["claim"] for a in env.assignments()} == set(now)
        for flags, state in ((second, None), (None, "ledger")):
            done = (
                env.standin.run("unprepare", *flags, f"--driver={NIC}")
                if flags
                else env.kubelet("unprepare", str(state))
            )
            assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        assert env.assignments() == []
        assert proc.terminate() == 0
    cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/second")


def test_the_checkpoint_junked_while_a_share_runs_refuses_another_share_until_unprepared(
    env: Env,
) -> None:
    """Issue 30, class 1: the share, rebuilt from its CDI spec, keeps its NIC and its VF.

    A new share the scheduler puts on that NIC is refused until the recovered share is
    unprepared; one it puts on another shared NIC is prepared there, never on the held VF.
    """
    cp, ns = env.cp, env.namespace
    with env.process("junk-first") as proc:
        first = env.kubelet("prepare", "junk")
        assert first.exit_code == 0, (first.doc, first.stderr[-2000:])
        assert proc.terminate() == 0
    [(held_pf, held_vf)] = _vfs(env).values()
    (env.dirs.state_dir / NIC / "checkpoint.json").write_text("{ junk")
    create_pod(cp, ns, "third", env.node, template="share", ref="d", containers=("main",))

    def bound() -> bool:
        pod = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/third")
        return bool(
            pod["spec"].get("nodeName") and pod.get("status", {}).get("resourceClaimStatuses")
        )

    wait_for(bound, timeout=60, what="the third pod to be scheduled")
    third = kubelet_flags(env.dirs, env.node, f"{ns}/third", state="junk-3")
    with env.process("junk-restart") as proc:
        first_try = env.standin.run("prepare", *third, f"--driver={NIC}", "--timeout=5s")
        if first_try.exit_code == 0:  # the scheduler put it on another shared NIC
            assert (held_pf, held_vf) not in _vfs(env).values(), "one VF handed to two shares"
        else:  # on the recovered share's NIC: refused until that share is unprepared
            text = json.dumps(first_try.doc) + first_try.stderr
            assert "whose checkpoint record was lost" in text, (text[-2000:], proc.log_tail(40))
        assert [a for a in env.assignments() if a["vf"] == held_vf and a["pf"] == held_pf]
        done = env.kubelet("unprepare", "junk")
        assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        again = env.standin.run("prepare", *third, f"--driver={NIC}")
        assert again.exit_code == 0, (again.doc, again.stderr[-2000:], proc.log_tail())
        gone = env.standin.run("unprepare", *third, f"--driver={NIC}")
        assert gone.exit_code == 0, gone.doc
        assert env.assignments() == []
        assert proc.terminate() == 0
    cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/third")
