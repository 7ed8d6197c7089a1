"""The real node's images from ``hack/node/images.py``, for tests that import them into containerd.

``build_images(out)`` runs the script (cached under ``${DRAKIT_CACHE_DIR:-~/.cache/drakit}/
images``, so only a cold cache builds) and returns each image's name and tarball, ready for
``ctr -n k8s.io images import --platform linux/amd64 <tar>``. ``load_script()`` imports the script
(or one of its sibling modules) as a module, for tests of its parts.
"""

from __future__ import annotations

import importlib
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


def load_script(name: str = "images") -> ModuleType:
    """``hack/node/images.py`` (or a sibling of it: ``image_recipe``, ``oci_layout``) as a module.

    hack/node goes on ``sys.path``, as it does when the script runs: that is where the script
    finds its siblings.
    """
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))
    return importlib.import_module(name)


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
