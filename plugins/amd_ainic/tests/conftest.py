"""An AINIC node for tests: a simulated tree, its SR-IOV kernel, and a drakit node on the kit.

:func:`ainic_node` builds a profile into memory with :func:`drakit.testing.build_sim_node`,
starts :class:`drakit_amd_ainic.sim.SriovKernel` beside it (so ``sriov_numvfs`` writes create VFs
as on a node), and runs :func:`drakit.testing.run_node`: claims go through the real kubelet
socket to the node's pipeline (checkpoint, CDI, config routing). Claims are allocated by hand
the way the scheduler would (shared devices through ``consumedCapacity`` and ``shareID``).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drakit.host.pluginhost import PluginHost
from drakit.host.startup import fast_tmp
from drakit.models import (
    ClaimPrepareResult,
    ClaimRef,
    ClaimUnprepareResult,
    PreparedDevice,
)
from drakit.prepare.pipeline import DriverState
from drakit.sim import get_profile
from drakit.testing import ClaimStore, RunningNode, build_sim_node, run_node
from drakit_amd_ainic.plugin import AmdAinicPlugin
from drakit_amd_ainic.sim import SriovKernel

DRIVER = "ainic.amd.drakit.io"
NODE = "node-a"
NIC_CONFIG = "ainic.drakit.io/v1alpha1"


@dataclass
class AinicNode:
    """One simulated node with the AINIC backend behind the real pipeline."""

    root: Path
    running: RunningNode
    kernel: SriovKernel

    @property
    def state(self) -> DriverState:
        return self.running.node.states[DRIVER]

    @property
    def claims(self) -> ClaimStore:
        return self.running.claims

    @property
    def host(self) -> PluginHost:
        return self.running.host

    @property
    def cdi_dir(self) -> Path:
        return self.running.cdi_dir

    @property
    def plugin(self) -> AmdAinicPlugin:
        p = self.host.backends["amd_ainic"]
        assert isinstance(p, AmdAinicPlugin)
        return p

    def add(
        self,
        name: str,
        devices: list[tuple[str, str, dict[str, str] | None]],
        config: list[dict[str, Any]] | None = None,
    ) -> ClaimRef:
        """Store an allocated claim: ``devices`` are (request, device, consumed capacity)."""
        uid = str(uuid.uuid4())
        results = []
        for request, device, consumed in devices:
            r: dict[str, Any] = {
                "request": request,
                "driver": DRIVER,
                "pool": NODE,
                "device": device,
            }
            if consumed is not None:
                r["consumedCapacity"] = consumed
                r["shareID"] = str(uuid.uuid4())
            results.append(r)
        self.claims.add(
            {
                "metadata": {"namespace": "ns", "name": name, "uid": uid},
                "status": {"allocation": {"devices": {"results": results, "config": config or []}}},
            }
        )
        return ClaimRef(namespace="ns", name=name, uid=uid)

    def prepare(self, *refs: ClaimRef) -> dict[str, ClaimPrepareResult]:
        """One NodePrepareResources call over the node's kubelet socket."""
        return self.running.kubelet.prepare_batch(DRIVER, refs)

    def unprepare(self, *refs: ClaimRef) -> dict[str, ClaimUnprepareResult]:
        """One NodeUnprepareResources call over the node's kubelet socket."""
        return self.running.kubelet.unprepare_batch(DRIVER, refs)

    def prepared(self, ref: ClaimRef) -> list[PreparedDevice]:
        return self.state.prepared_claims()[ref.uid].prepared["amd_ainic"]

    def cdi(self, ref: ClaimRef) -> dict[str, Any]:
        path = self.cdi_dir / f"k8s.{DRIVER}-claim_{ref.uid}.json"
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def env(self, ref: ClaimRef) -> dict[str, str]:
        out: dict[str, str] = {}
        for dev in self.cdi(ref)["devices"]:
            for item in dev["containerEdits"].get("env", []):
                key, _, value = item.partition("=")
                out[key] = value
        return out

    def device_nodes(self, ref: ClaimRef) -> list[str]:
        return [
            n["path"]
            for dev in self.cdi(ref)["devices"]
            for n in dev["containerEdits"].get("deviceNodes", [])
        ]

    def numvfs(self, pf: str) -> int:
        return len(list((self.root / "sys/bus/pci/devices" / pf).resolve().glob("virtfn*")))


def nic_config(**fields: Any) -> dict[str, Any]:
    """An opaque config entry for the claim carrying a ``NicConfig``."""
    return {
        "source": "FromClaim",
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": NIC_CONFIG, "kind": "NicConfig", **fields},
        },
    }


@contextmanager
def ainic_node(profile: str, **ainic: Any) -> Iterator[AinicNode]:
    """A node on ``profile`` with ``plugins.amd_ainic`` = ``ainic`` (state under the tree)."""
    with tempfile.TemporaryDirectory(prefix="drakit-ainic-", dir=fast_tmp()) as tmp:
        base = Path(tmp)
        sim = build_sim_node(profile, base / "root", node_name=NODE)
        with (
            SriovKernel(get_profile(profile), sim.root) as kernel,
            run_node({"plugins": {"amd_ainic": ainic}}, sim, state_dir=base / "node") as running,
        ):
            yield AinicNode(sim.root, running, kernel)
