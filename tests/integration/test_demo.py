"""``drakit demo``: on drakit.allocator only, on every profile, with --claim and --config."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from drakit.commands.cli import cli
from drakit.commands.demo import run_demo
from drakit.cpuset import parse_cpulist
from drakit.sim import list_profiles, materialize, profile_info
from drakit_cpu.topology import CpuTopology


def _run(**kw: Any) -> tuple[dict[str, Any], str]:
    buf = io.StringIO()
    summary = run_demo(console=Console(file=buf, width=400, color_system=None), **kw)
    return summary, buf.getvalue()


def _printed_claim(out: str) -> Any:
    """The YAML inside the panel that shows the claim."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "claim" in line and line.startswith("╭"))
    body = []
    for line in lines[start + 1 :]:
        if line.startswith("╰"):
            break
        body.append(line[2:].rstrip()[:-1].rstrip())
    return yaml.safe_load("\n".join(body))


def _numa_of_prepared(profile: str, env: list[str]) -> Counter[int]:
    cpus = frozenset().union(
        *(parse_cpulist(e.split("=", 1)[1]) for e in env if e.startswith("DRAKIT_CPUSET_"))
    )
    with materialize(profile) as root:
        topo = CpuTopology.from_sysfs(Path(root))
        return Counter(topo.info(c).numa_node for c in cpus)


@pytest.mark.parametrize("profile", list_profiles())
def test_demo_runs_on_every_profile(profile: str) -> None:
    summary, out = _run(profile=profile)
    claim = summary["claim"]
    # the claim printed is the claim allocated and prepared, allocation included
    assert _printed_claim(out) == claim
    assert summary["left_after_unprepare"] == 0
    results = claim["status"]["allocation"]["devices"]["results"]
    cpu = [r for r in results if r["driver"] == "cpu.drakit.io"]
    assert cpu, results
    per_numa = _numa_of_prepared(profile, summary["env"])
    wanted = sum(int(r["consumedCapacity"]["cpu"]) for r in cpu)
    assert sum(per_numa.values()) == wanted
    # the distributed CPU request gets CPUs on every NUMA node it was split over
    assert len(per_numa) == len(cpu)
    if profile != "minimal-1s":
        assert len(per_numa) >= 2, per_numa


@pytest.mark.parametrize("profile", [p for p in list_profiles() if profile_info(p).gpus])
def test_demo_shows_the_accelerators_of_every_profile(profile: str) -> None:
    """An MI300X machine's AMD GPUs as much as an H200's NVIDIA ones (the demo's backends)."""
    summary, out = _run(profile=profile)
    gpus = profile_info(profile).gpus
    by_backend = summary["backends"]
    accelerators = by_backend.get("nvidia_gpu", 0) + by_backend.get("amd_gpu", 0)
    assert accelerators >= gpus, by_backend
    backend = "amd_gpu" if profile.startswith("mi300x") else "nvidia_gpu"
    assert by_backend.get(backend, 0) >= gpus, by_backend
    assert backend in out  # the table names the backend of each row


def test_demo_default_profile_has_pairs_and_sixteen_cpus() -> None:
    summary, out = _run()
    results = summary["claim"]["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in results if "pair" in r["device"]] == ["accel/aligned"] * 2
    assert sum(int(r["consumedCapacity"]["cpu"]) for r in results if "cpu" in r["device"]) == 16
    assert "2 GPU-NIC pairs (numa-preferred) + 16 CPUs" in out


CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: big-gpu}
spec:
  selectors:
  - cel: {expression: 'device.driver == "pairs.composite.drakit.io"'}
  - cel: {expression: 'device.attributes["pairs.composite.drakit.io"].type == "gpu"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: mine}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: big-gpu, count: 2}
    constraints:
    - {matchAttribute: resource.kubernetes.io/numaNode}
"""


def test_demo_with_a_claim_file(tmp_path: Path) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text(CLAIM)
    summary, _ = _run(claim=path)
    assert summary["claim"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert len(summary["allocated"]) == 2
    assert len(summary["cdi_ids"]) == 2


def test_demo_claim_that_does_not_fit_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text(CLAIM.replace("count: 2", "count: 9"))
    result = CliRunner().invoke(cli, ["demo", "--claim", str(path)])
    assert result.exit_code != 0
    assert "needs 9 devices, 8 eligible" in str(result.exception)


def test_demo_with_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "drakit.yaml"
    path.write_text("plugins:\n  cpu: {policy: packed}\n")
    summary, _ = _run(profile="dgx-h100", config=path)
    assert set(summary["devices"]) == {"cpu.drakit.io"}
    assert {
        r["driver"] for r in summary["claim"]["status"]["allocation"]["devices"]["results"]
    } == {"cpu.drakit.io"}


SHARED_NIC = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nic-share}
spec:
  devices:
    requests:
    - name: nic
      exactly: {deviceClassName: ainic.amd.drakit.io}
"""


def test_demo_prepares_a_shared_nic_on_a_profile_without_vfs(tmp_path: Path) -> None:
    """The simulated SR-IOV kernel runs in the demo: the NIC share's VF is made on demand."""
    config = tmp_path / "drakit.yaml"
    config.write_text("plugins:\n  amd_ainic: {default_mode: shared, vf_limit: 2}\n")
    claim = tmp_path / "claim.yaml"
    claim.write_text(SHARED_NIC)
    summary, _ = _run(profile="h200-8gpu-8ainic", config=config, claim=claim)
    [result] = summary["claim"]["status"]["allocation"]["devices"]["results"]
    assert result["shareID"]
    assert summary["left_after_unprepare"] == 0
    assert any(e.startswith("DRAKIT_") for e in summary["env"]), summary["env"]
