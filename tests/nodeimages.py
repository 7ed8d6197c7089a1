"""The real node's images from ``hack/node/images.py``, for tests that import them into containerd.

``build_images(out)`` runs the script (cached under ``${DRAKIT_CACHE_DIR:-~/.cache/drakit}/
images``, so only a cold cache builds) and returns each image's name and tarball, ready for
``ctr -n k8s.io images import --platform linux/amd64 <tar>``. ``load_script()`` imports the script
as a module, for tests of its parts.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tests.public_api import REPO_ROOT

SCRIPT = REPO_ROOT / "hack" / "node" / "images.py"


@dataclass(frozen=True)
class Image:
    """An image written by images.py: its reference and its OCI layout tarball."""

    name: str
    tar: Path


def load_script() -> ModuleType:
    """``hack/node/images.py`` as a module (it is a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location("drakit_node_images", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def build_images(out: Path, *images: str, timeout: float = 900) -> dict[str, Image]:
    """Run images.py for ``images`` ("test", "drakit"; default both) into ``out``."""
    script = load_script()
    chosen = images or ("test", "drakit")
    argv = [sys.executable, str(SCRIPT), "--out", str(out)]
    for image in chosen:
        argv += ["--image", image]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/node/images.py failed:\n{proc.stderr}")
    if Path(proc.stdout.strip()) != out.resolve():
        raise RuntimeError(f"hack/node/images.py printed {proc.stdout!r}, not {out}")
    names = {
        "test": script.TEST_IMAGE,
        "drakit": f"{script.DRAKIT_REPOSITORY}:{script.drakit_version()}",
    }
    return {image: Image(name=names[image], tar=out / f"{image}.tar") for image in chosen}
