"""The helm CLI and the chart in ``deployments/helm/drakit``, for the chart tests.

helm comes from ``hack/helm/build.sh`` (built from the Go module proxy, pinned by
``hack/helm/go.mod``, cached under ``~/.cache/drakit/helm``); ``make test`` builds it first, so
a test only builds it on a cold cache outside ``make``. ``DRAKIT_HELM_BIN`` points at a prebuilt
one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART = REPO_ROOT / "deployments" / "helm" / "drakit"
BUILD_SCRIPT = REPO_ROOT / "hack" / "helm" / "build.sh"

#: The backend sets the chart is checked with: the default values, each backend alone, the
#: GPU-NIC pairing set, and everything.
BACKEND_SETS: dict[str, tuple[str, ...]] = {
    "default": (),
    "cpu": ("cpu",),
    "nvidia_gpu": ("nvidia_gpu",),
    "amd_gpu": ("amd_gpu",),
    "amd_ainic": ("amd_ainic",),
    "pairs": ("nvidia_gpu", "amd_ainic", "composite"),
    "all": ("cpu", "nvidia_gpu", "amd_gpu", "amd_ainic", "composite"),
}
ALL_BACKENDS = ("cpu", "nvidia_gpu", "amd_gpu", "amd_ainic", "composite")


class HelmError(RuntimeError):
    """helm could not be built, or a helm command failed (the message carries its stderr)."""


def helm_binary() -> Path:
    """The helm binary for the committed lock, built when the cache is cold.

    Raises:
        HelmError: With build.sh's last line when nothing usable exists.
    """
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    lines = proc.stderr.strip().splitlines()
    if proc.returncode != 0 or not proc.stdout.strip():
        raise HelmError(lines[-1] if lines else f"{BUILD_SCRIPT} exited with {proc.returncode}")
    return Path(proc.stdout.strip().splitlines()[-1])


def backend_values(enabled: Sequence[str]) -> dict[str, Any]:
    """Values that enable exactly ``enabled`` (empty: the chart's defaults)."""
    if not enabled:
        return {}
    return {"backends": {name: {"enabled": name in enabled} for name in ALL_BACKENDS}}


@dataclass
class Helm:
    """Runs helm on the chart.

    Args:
        binary: The helm executable.
        work_dir: Where values files are written.
    """

    binary: Path
    work_dir: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``helm ARGS`` with a private home, so no user configuration leaks in.

        Raises:
            HelmError: If ``check`` and helm exits non-zero.
        """
        home = self.work_dir / "helm-home"
        env = {
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "PATH": "/usr/bin:/bin",
        }
        proc = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        if check and proc.returncode != 0:
            raise HelmError(f"helm {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc

    def values_file(self, values: Mapping[str, Any], name: str = "values.yaml") -> Path:
        """Write ``values`` to a file under :attr:`work_dir`; return its path."""
        path = self.work_dir / name
        path.write_text(yaml.safe_dump(dict(values)))
        return path

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        release: str = "drakit",
        namespace: str = "drakit",
        extra: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """``helm template`` with ``values``; return the rendered objects.

        Raises:
            HelmError: If helm refuses the values or the chart.
        """
        args = ["template", release, str(CHART), "--namespace", namespace, *extra]
        if values:
            args += ["--values", str(self.values_file(values))]
        out = self.run(*args).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(objects: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    """The objects of one kind, in rendering order."""
    return [o for o in objects if o["kind"] == kind]


def one(objects: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    """The single object of ``kind``; fails the caller's assertion when there are several."""
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]
