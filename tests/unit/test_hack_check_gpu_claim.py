"""hack/check-gpu-claim.py over a claim prepared on a simulated node, and its parsers.

The simulated device nodes are stand-ins (``/dev/null``'s numbers, or empty files without the
privilege to make devices), so the script must find exactly those and nothing else in a good
claim's spec; a missing library and a UUID the node lacks are reported.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import ModuleType

import pytest
from tests.hackscript import load_hack_script

from drakit.testing import allocated_claim
from drakit.testing.plugin import NodeFactory, SimNodeFactory
from drakit_nvidia_gpu.sim import load_nvml_description

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
236 nvidia-caps
509 nvidia-uvm

Block devices:
  8 sd
"""
SMI = """GPU 0: NVIDIA H200 (UUID: GPU-aaaa)
  MIG 1g.18gb     Device  0: (UUID: MIG-bbbb)
GPU 1: NVIDIA H200 (UUID: GPU-cccc)
"""


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_hack_script("check-gpu-claim.py")


def test_parsers(script: ModuleType) -> None:
    assert script.proc_devices(PROC_DEVICES) == {
        "mem": 1,
        "nvidia-frontend": 195,
        "nvidia-caps": 236,
        "nvidia-uvm": 509,
    }
    assert script.smi_uuids(SMI) == {"GPU-aaaa", "MIG-bbbb", "GPU-cccc"}


def test_a_prepared_claim_is_checked_against_the_node(
    script: ModuleType,
    drakit_sim_node: SimNodeFactory,
    drakit_node: NodeFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sim = drakit_sim_node("dgx-h100", node_name="n1")
    node = drakit_node({"plugins": {"nvidia_gpu": {"health_watch": False}}}, sim)
    driver = node.driver_names()["nvidia_gpu"]
    claim = allocated_claim("two", [("a", driver, "gpu-2"), ("b", driver, "gpu-5")], pool="n1")
    node.claims.add(claim)
    out = node.kubelet.prepare(claim)
    assert out.error is None
    [spec] = out.spec_files()
    uuids = ",".join(g.uuid for g in load_nvml_description(sim.root).devices)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "devices").write_text(PROC_DEVICES)
    args = ["--spec", str(spec), "--uuids", uuids, "--proc", str(proc), "--json"]

    assert script.main(args) == 1  # the stand-in nodes are not NVIDIA's
    problems = _problems(capsys)
    gpu2 = sim.root / "dev" / "nvidia2"
    if stat.S_ISCHR(gpu2.stat().st_mode):  # made with CAP_MKNOD: /dev/null's numbers
        assert (
            f"device {_cdi_name(spec, 'gpu-2')}: /dev/nvidia2: {gpu2} has minor 3, expected 2"
            in (problems)
        )
        assert all("has minor" in p or "has major" in p for p in problems), problems
    else:
        assert all("is not a character device" in p for p in problems), problems
    assert not [p for p in problems if "mount" in p or "libcuda" in p or "NVIDIA_VISIBLE" in p]

    libcuda = next((sim.root / "usr/lib/x86_64-linux-gnu").glob("libcuda.so.5*"))
    os.rename(libcuda, libcuda.with_name("moved"))
    script.main([*args[:3], "GPU-other", *args[4:]])
    problems = _problems(capsys)
    assert any(f"{libcuda} is missing on the host" in p for p in problems), problems
    assert any("NVIDIA_VISIBLE_DEVICES names GPU-" in p and "does not have" in p for p in problems)
    os.rename(libcuda.with_name("moved"), libcuda)
    assert node.kubelet.unprepare(claim) is None


def _problems(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return list(json.loads(capsys.readouterr().out)["problems"])


def _cdi_name(spec: Path, device: str) -> str:
    names = [d["name"] for d in json.loads(spec.read_text())["devices"]]
    return str(next(n for n in names if n.endswith(device)))
