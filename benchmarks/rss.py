"""Resident memory of a drakit node process with four backends (cpu, GPU, AINIC, composite).

The backends are named (``BACKENDS``), not left to the defaults, so that the figure keeps
measuring the same node when the defaults grow (``amd_gpu`` joined them after the recorded
runs). With ``--cluster`` the process is the real ``drakit node`` command (the console script
of this environment, what ``uv run drakit node`` executes) against the benchmark's control
plane, on the ``h200-8gpu-8ainic`` profile. Without it, ``benchmarks/node_child.py`` starts
:class:`drakit.node.daemon.Node` with :class:`drakit.prepare.memory.ClaimStore` instead (no
Kubernetes client, no publisher); the figure names say which one was measured.

``VmRSS`` and ``VmHWM`` are read from ``/proc/<pid>/status`` once ``/readyz`` answers 200, and
``VmRSS`` again after the node has idled for a while (health polls, publisher resyncs).

Baseline ``python_rss``: ``VmRSS`` of a bare interpreter of the same Python that has imported
nothing (``python -c`` waiting on stdin), started in the same run.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.common import Baseline, Report, free_port

from drakit.host.startup import fast_tmp

if TYPE_CHECKING:
    from tests.e2e.controlplane import ControlPlane

__all__ = ["proc_status_kib", "run_rss"]

BENCH_DIR = Path(__file__).resolve().parent
BACKENDS = ("cpu", "nvidia_gpu", "amd_ainic", "composite")
"""The backends of the measured node (the recorded runs' defaults)."""


def proc_status_kib(pid: int) -> dict[str, int]:
    """``Vm*``/``Rss*`` lines of ``/proc/<pid>/status`` in KiB, plus ``Threads``."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key.startswith(("Vm", "Rss")) or key == "Threads":
            out[key] = int(rest.split()[0])
    return out


def _bare_python_rss() -> int:
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdin is not None
        proc.stdout.readline()
        rss = proc_status_kib(proc.pid)["VmRSS"]
        proc.stdin.close()
        proc.wait(timeout=10)
    return rss


def _drakit_exe() -> str:
    local = Path(sys.executable).with_name("drakit")
    if local.exists():
        return str(local)
    found = shutil.which("drakit")
    if found is None:
        raise RuntimeError("the drakit console script is not installed in this environment")
    return found


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float) -> float:
    began = time.perf_counter()
    deadline = began + timeout
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"node exited with {proc.returncode} before ready:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return time.perf_counter() - began
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"node not ready after {timeout:.0f}s; log: {log}")


def run_rss(report: Report, cp: ControlPlane | None, settle: float) -> None:
    """Figure 4: VmRSS/VmHWM of a node process with the four ``BACKENDS``."""
    bare = [_bare_python_rss() for _ in range(3)]
    report.baseline(
        Baseline(
            "python_rss",
            sorted(bare)[1] / 1024,
            "MiB",
            f"VmRSS of a bare `{Path(sys.executable).name} -c` interpreter (nothing imported), "
            "median of 3",
            samples=len(bare),
        )
    )
    with tempfile.TemporaryDirectory(prefix="drakit-bench-rss-", dir=fast_tmp()) as tmp:
        root = Path(tmp)
        port = free_port()
        log = root / "node.log"
        if cp is not None:
            name = "bench-rss"
            cp.create_node(name)
            (root / "kubelet" / "plugins_registry").mkdir(parents=True)
            config = root / "drakit.yaml"
            config.write_text(json.dumps({"plugins": {name: {} for name in BACKENDS}}))
            argv = [
                _drakit_exe(),
                "node",
                "--config",
                str(config),
                "--kubeconfig",
                str(cp.kubeconfig),
                "--profile",
                "h200-8gpu-8ainic",
                "--node-name",
                name,
                "--kubelet-dir",
                str(root / "kubelet"),
                "--cdi-dir",
                str(root / "cdi"),
                "--state-dir",
                str(root / "state"),
                "--metrics-port",
                str(port),
            ]
            what = "`drakit node` (real API server, publisher on)"
        else:
            argv = [
                sys.executable,
                str(BENCH_DIR / "node_child.py"),
                str(root),
                str(port),
                ",".join(BACKENDS),
            ]
            what = "Node(claims=InMemoryClaims()) subprocess (no cluster, no publisher)"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
            try:
                ready_s = _wait_ready(proc, port, log, timeout=180)
                at_ready = proc_status_kib(proc.pid)
                time.sleep(settle)
                later = proc_status_kib(proc.pid)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        mode = "drakit node" if cp is not None else "in-memory node"
        report.add(
            "rss",
            f"VmRSS at ready, {mode}",
            at_ready["VmRSS"] / 1024,
            "MiB",
            "python_rss",
            process=what,
            seconds_to_ready=round(ready_s, 2),
            threads=at_ready.get("Threads"),
        )
        report.add(
            "rss",
            f"VmRSS after {settle:.0f}s idle, {mode}",
            later["VmRSS"] / 1024,
            "MiB",
            "python_rss",
            process=what,
            threads=later.get("Threads"),
        )
        report.add(
            "rss",
            f"VmHWM (peak), {mode}",
            later["VmHWM"] / 1024,
            "MiB",
            "python_rss",
            process=what,
            exit_code=proc.returncode,
        )
