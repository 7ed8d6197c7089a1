"""One node's own cost at density: memory and CPU per discovery round on the largest machine.

Usage::

    uv run python benchmarks/density.py [--rounds 5] [-o benchmarks/results/<name>.json]

The machine: ``drakit_sim_profiles.profiles.h200_8gpu_8ainic_dense()`` (8 H200 in MIG mode, 8
Pollara AINICs with 255 VFs each: 2,040 VFs), built once into /dev/shm. The configuration:
``cpu``, ``nvidia_gpu`` with ``mig_partitions: true`` (every MIG placement of every GPU a
device), ``amd_ainic`` with ``default_mode: vf`` (every VF a device). Two child processes:

* ``node``: :class:`drakit.node.daemon.Node` as ``drakit node`` runs it minus the Kubernetes
  client and the publisher (``benchmarks/node_child.py``'s set-up, claims in memory), on that
  root: ``VmRSS`` at ``/readyz`` and after 5 s idle, ``VmHWM``;
* ``rounds``: one plugin host on that root, then ``--rounds`` discovery rounds as the publisher
  runs them (:func:`drakit.host.inventory.build_inventory`, then every pool rendered to slices):
  CPU seconds (user + system) and wall seconds per round, ``VmRSS`` after each.

Baseline: the same two children on ``h200-8gpu-8ainic`` (the default backends' machine,
without MIG or VFs), in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import emit

from drakit.sim import SysfsBuilder, build_profile

PLUGINS: dict[str, dict[str, Any]] = {
    "cpu": {},
    "nvidia_gpu": {"mig_partitions": True},
    "amd_ainic": {"default_mode": "vf"},
}


def _status(pid: int | str = "self") -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(line.split()[1]) / 1024, 1)
    return out


def _settings(root: Path, work: Path, port: int = 0) -> Any:
    from drakit.host.settings import DrakitSettings  # noqa: PLC0415

    return DrakitSettings(
        sysfs_root=root,
        plugins=PLUGINS,
        node_name="bench-density",
        kubelet_dir=work / "kubelet",
        cdi_dir=work / "cdi",
        state_dir=work / "state",
        metrics={"enabled": True, "address": "127.0.0.1", "port": port},
        log_level="WARNING",
    )


def child_rounds(root: Path, work: Path, rounds: int) -> None:
    """Discovery rounds as the publisher runs them; one JSON line."""
    from drakit.host.inventory import build_inventory  # noqa: PLC0415
    from drakit.host.startup import open_host  # noqa: PLC0415

    out: dict[str, Any] = {"rounds": []}
    with open_host(_settings(root, work)) as host:
        for _ in range(rounds):
            r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            inv = build_inventory(host)
            slices = inv.slices()
            r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            out["rounds"].append(
                {
                    "cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3),
                    "wall_s": round(w1 - w0, 3),
                    "rss_mib": _status()["VmRSS"],
                }
            )
        out["devices"] = sum(len(p.devices) for p in inv.pools)
        out["slices"] = len(slices)
        out["by_driver"] = {p.driver: len(p.devices) for p in inv.pools}
    out["hwm_mib"] = _status()["VmHWM"]
    print(json.dumps(out), flush=True)


def child_node(root: Path, work: Path, port: int) -> None:
    """The node daemon without a cluster, until SIGTERM."""
    from drakit.node.daemon import Node  # noqa: PLC0415
    from drakit.prepare.memory import ClaimStore  # noqa: PLC0415

    (work / "kubelet" / "plugins_registry").mkdir(parents=True, exist_ok=True)
    Node(
        _settings(root, work, port), claims=ClaimStore(copy=False), boot_id="b", instance_id="d"
    ).run()


def _free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(root: Path, tmp: Path, rounds: int) -> dict[str, Any]:
    here = str(Path(__file__).resolve())
    work = Path(tempfile.mkdtemp(dir=tmp))
    done = subprocess.run(
        [sys.executable, here, "--child-rounds", str(root), str(work), str(rounds)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    cpus = [r["cpu_s"] for r in out["rounds"][1:]] or [out["rounds"][0]["cpu_s"]]
    out["cpu_s_per_round_median"] = statistics.median(cpus)
    port = _free_port()
    work = Path(tempfile.mkdtemp(dir=tmp))
    proc = subprocess.Popen([sys.executable, here, "--child-node", str(root), str(work), str(port)])
    try:
        began = time.monotonic()
        while time.monotonic() - began < 600:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"node child exited with {proc.returncode}")
            time.sleep(0.2)
        out["node_ready_s"] = round(time.monotonic() - began, 1)
        out["node_at_ready_mib"] = _status(proc.pid)
        time.sleep(5)
        out["node_idle_mib"] = _status(proc.pid)
        ticks = os.sysconf("SC_CLK_TCK")
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["node_cpu_s_to_ready_and_idle"] = round((int(fields[11]) + int(fields[12])) / ticks, 2)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return out


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--child-rounds":
        child_rounds(Path(argv[2]), Path(argv[3]), int(argv[4]))
        return 0
    if len(argv) > 1 and argv[1] == "--child-node":
        child_node(Path(argv[2]), Path(argv[3]), int(argv[4]))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args(argv[1:])
    from drakit_sim_profiles.profiles import h200_8gpu_8ainic_dense  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="drakit-sim-density-", dir="/dev/shm"))
    report: dict[str, Any] = {
        "meta": {
            "command": " ".join(argv),
            "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        }
    }
    try:
        t = time.perf_counter()
        dense = SysfsBuilder(h200_8gpu_8ainic_dense()).build(tmp / "dense")
        report["meta"]["build_dense_s"] = round(time.perf_counter() - t, 1)
        plain = build_profile("h200-8gpu-8ainic", tmp / "plain")
        report["plain"] = measure(plain, tmp, args.rounds)
        print(json.dumps({"plain": report["plain"]}), flush=True)
        report["dense"] = measure(dense, tmp, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["meta"]["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    emit(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
