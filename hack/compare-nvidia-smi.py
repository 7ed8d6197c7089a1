"""Compare what drakit discovers on a real NVIDIA node with what ``nvidia-smi -q`` reports.

Usage, on a node with the NVIDIA driver (from the repository root)::

    uv run python hack/compare-nvidia-smi.py            # exit 0: every GPU agrees
    uv run python hack/compare-nvidia-smi.py --json     # the comparison as JSON
    uv run python hack/compare-nvidia-smi.py --config drakit.yaml   # the node's configuration

drakit's GPUs are the rows its NVIDIA backend (``--plugin``, default ``nvidia_gpu``) published,
whichever driver name they are published under: with the composite backend enabled (the default
when no configuration enables backends) they are under the composite's driver, not
``gpu.nvidia.drakit.io``.

For every GPU it compares, by PCI bus id: the UUID, the product name, the memory (NVML's total
in bytes against nvidia-smi's ``FB Memory Usage / Total`` in MiB), the bus id itself and the
NUMA node (``resource.kubernetes.io/numaNode`` against nvidia-smi's ``numa_id`` where the XML
has one, else against sysfs ``numa_node``, which is where NVIDIA's own driver reads it). A
GPU seen by only one side is a mismatch too. The NVIDIA backend runs through the real
``pynvml`` here (no simulated root), so this checks the seam's real path.

It needs ``nvidia-smi`` on PATH. It has not been run on real hardware yet (see
``docs/gpu-backends.md``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

DRIVER = "gpu.nvidia.drakit.io"
PLUGIN = "nvidia_gpu"
NUMA = "resource.kubernetes.io/numaNode"
BUS = "resource.kubernetes.io/pciBusID"
MIB = 2**20


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """``00000000:1B:00.0`` -> ``0000:1b:00.0`` (the go-nvlib rule drakit follows)."""
    bus = nvml_bus_id.strip().lower()
    return bus[4:] if len(bus) == 16 else bus  # noqa: PLR2004 - 8-digit domain


def parse_smi(xml_text: str, sys_root: Path = Path("/sys")) -> dict[str, dict[str, Any]]:
    """Bus id -> ``uuid``, ``product``, ``memory`` (bytes), ``numa`` from ``nvidia-smi -q -x``."""
    root = ET.fromstring(xml_text)  # noqa: S314 - trusted local tool output
    out = {}
    for gpu in root.findall("gpu"):
        bus = sysfs_bus_id(gpu.get("id") or gpu.findtext("pci/pci_bus_id") or "")
        total = (gpu.findtext("fb_memory_usage/total") or "").split()
        numa_text = gpu.findtext("numa_id")
        numa: int | None = None
        if numa_text and numa_text.strip().lstrip("-").isdigit():
            numa = int(numa_text)
        else:
            try:
                numa = int((sys_root / "bus/pci/devices" / bus / "numa_node").read_text())
            except (OSError, ValueError):
                numa = None
        out[bus] = {
            "uuid": (gpu.findtext("uuid") or "").strip(),
            "product": (gpu.findtext("product_name") or "").strip(),
            "memory": int(total[0]) * MIB if total and total[0].isdigit() else None,
            "numa": None if numa is None or numa < 0 else numa,
        }
    return out


def parse_drakit(rows: list[dict[str, Any]], plugin: str = PLUGIN) -> dict[str, dict[str, Any]]:
    """Bus id -> the same keys from ``drakit discover -o json`` (full GPUs only).

    A row is the NVIDIA backend's when its ``plugin`` is ``plugin`` (under any driver: its
    own, or the composite's); a row without ``plugin`` (older output) when its driver is the
    backend's default.
    """
    out = {}
    for r in rows:
        attrs = r["attributes"]
        ours = r["plugin"] == plugin if "plugin" in r else r["driver"] == DRIVER
        if not ours or attrs.get("type") != "gpu":
            continue
        mem = r.get("capacity", {}).get("memory")
        out[attrs[BUS]] = {
            "uuid": attrs.get("uuid"),
            "product": attrs.get("productName"),
            "memory": int(mem) if mem is not None else None,
            "numa": attrs.get(NUMA),
        }
    return out


def compare(drakit: dict[str, dict[str, Any]], smi: dict[str, dict[str, Any]]) -> list[str]:
    """Every disagreement, one line each (empty when both sides agree on every GPU)."""
    problems = []
    for bus in sorted(drakit.keys() | smi.keys()):
        if bus not in drakit:
            problems.append(f"{bus}: nvidia-smi lists a GPU that drakit did not publish")
            continue
        if bus not in smi:
            problems.append(f"{bus}: drakit published a GPU that nvidia-smi does not list")
            continue
        for key in ("uuid", "product", "memory", "numa"):
            ours, theirs = drakit[bus][key], smi[bus][key]
            if ours != theirs:
                problems.append(f"{bus}: {key}: drakit {ours!r}, nvidia-smi {theirs!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Run both tools and print the comparison; 0 when they agree, 1 otherwise, 2 on error."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--config", help="drakit YAML configuration (as the node runs it)")
    parser.add_argument(
        "--plugin", default=PLUGIN, help="the NVIDIA backend's name in the configuration"
    )
    args = parser.parse_args(argv)
    smi_bin, drakit_bin = shutil.which("nvidia-smi"), shutil.which("drakit")
    if smi_bin is None or drakit_bin is None:
        print(
            "needs nvidia-smi and drakit on PATH (run with uv run on a GPU node)", file=sys.stderr
        )
        return 2
    xml_text = subprocess.run(
        [smi_bin, "-q", "-x"], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    config = ["--config", args.config] if args.config else []
    discovered = subprocess.run(
        [drakit_bin, "discover", "-o", "json", *config],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    ours, theirs = parse_drakit(json.loads(discovered), args.plugin), parse_smi(xml_text)
    problems = compare(ours, theirs)
    if args.json:
        print(json.dumps({"drakit": ours, "nvidia_smi": theirs, "problems": problems}, indent=2))
    else:
        for bus in sorted(ours):
            print(f"{bus}: {ours[bus]}")
        print("\n".join(problems) if problems else f"all {len(ours)} GPUs agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
