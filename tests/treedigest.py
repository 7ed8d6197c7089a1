"""A digest of a directory tree, to compare simulated trees built twice or pinned."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_digest(root: Path) -> str:
    """SHA-256 over relative paths, file contents and symlink targets, in sorted order.

    The simulated device nodes under ``dev/`` are left out: they are character devices or
    regular files depending on the builder's privilege (``drakit.sim.devnodes``), and
    ``tests/unit/test_sim_devnodes.py`` checks them by name and kind.
    """
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root) and "dev" in dirnames:
            dirnames.remove("dev")
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        h.update(f"D {rel_dir}\n".encode())
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            path = os.path.join(dirpath, name)
            rel = os.path.join(rel_dir, name)
            if os.path.islink(path):
                h.update(f"L {rel} {os.readlink(path)}\n".encode())
            else:
                h.update(f"F {rel} ".encode() + Path(path).read_bytes() + b"\n")
    return h.hexdigest()
