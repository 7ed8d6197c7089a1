"""hack/compare-nvidia-smi.py: its parsing and comparison, on nvidia-smi XML and drakit rows.

The script itself runs only on a GPU node; what can be checked here is that it reads
``nvidia-smi -q -x`` and ``drakit discover -o json`` correctly and reports every disagreement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests.hackscript import load_hack_script

XML = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>580.126.20</driver_version>
  <gpu id="00000000:1B:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>GPU-a8af5e85-fd19-5069-a00c-f4f60c40d49c</uuid>
    <pci><pci_bus_id>00000000:1B:00.0</pci_bus_id></pci>
    <fb_memory_usage><total>81559 MiB</total><used>0 MiB</used></fb_memory_usage>
    <numa_id>0</numa_id>
  </gpu>
</nvidia_smi_log>
"""


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_hack_script("compare-nvidia-smi.py")


def row(**attrs: object) -> dict[str, object]:
    base: dict[str, object] = {
        "type": "gpu",
        "uuid": "GPU-a8af5e85-fd19-5069-a00c-f4f60c40d49c",
        "productName": "NVIDIA H100 80GB HBM3",
        "resource.kubernetes.io/pciBusID": "0000:1b:00.0",
        "resource.kubernetes.io/numaNode": 0,
    }
    base.update(attrs)
    return {
        "driver": "gpu.nvidia.drakit.io",
        "device": "gpu-0",
        "attributes": base,
        "capacity": {"memory": str(81559 * 2**20)},
    }


def test_agreeing_sides_report_nothing(script: ModuleType) -> None:
    smi = script.parse_smi(XML)
    assert smi == {
        "0000:1b:00.0": {
            "uuid": "GPU-a8af5e85-fd19-5069-a00c-f4f60c40d49c",
            "product": "NVIDIA H100 80GB HBM3",
            "memory": 81559 * 2**20,
            "numa": 0,
        }
    }
    assert script.compare(script.parse_drakit([row()]), smi) == []


def test_every_disagreement_is_named(script: ModuleType) -> None:
    ours = script.parse_drakit([row(**{"resource.kubernetes.io/numaNode": 1, "uuid": "GPU-x"})])
    problems = script.compare(ours, script.parse_smi(XML))
    assert problems == [
        "0000:1b:00.0: uuid: drakit 'GPU-x', nvidia-smi 'GPU-a8af5e85-fd19-5069-a00c-f4f60c40d49c'",
        "0000:1b:00.0: numa: drakit 1, nvidia-smi 0",
    ]
    only_smi = script.compare({}, script.parse_smi(XML))
    assert only_smi == ["0000:1b:00.0: nvidia-smi lists a GPU that drakit did not publish"]


@pytest.mark.parametrize("config", ["default", "nvidia-only"])
def test_gpus_are_found_under_any_driver(script: ModuleType, tmp_path: Path, config: str) -> None:
    """With the composite on (the default) the GPUs are under its driver: 0 GPUs were found."""
    args = ["discover", "--profile", "h200-8gpu-8ainic", "-o", "json"]
    if config == "nvidia-only":
        cfg = tmp_path / "drakit.yaml"
        cfg.write_text("plugins:\n  nvidia_gpu: {}\n")
        args += ["--config", str(cfg)]
    out = subprocess.run(
        [str(Path(sys.executable).parent / "drakit"), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = json.loads(out)
    drivers = {r["driver"] for r in rows if r["plugin"] == "nvidia_gpu"}
    ours = script.parse_drakit(rows)
    assert len(ours) == 8
    assert all(v["uuid"].startswith("GPU-") for v in ours.values())
    if config == "default":
        assert drivers == {"pairs.composite.drakit.io"}
    else:
        assert drivers == {"gpu.nvidia.drakit.io"}
