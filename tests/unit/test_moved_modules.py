"""drakit 0.1.0's internal module paths still import until 0.2, with a warning naming the new one.

Scripts outside the repository (the side-by-side benchmark against the Go reference driver)
import some of them; see ``drakit.MOVED_MODULES``.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import drakit


@pytest.mark.parametrize(("old", "new"), sorted(drakit.MOVED_MODULES.items()))
def test_an_old_path_imports_the_new_modules_names_with_a_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        moved = importlib.import_module(old)
    target = importlib.import_module(new)
    public = getattr(target, "__all__", None) or [n for n in vars(target) if not n.startswith("_")]
    assert public
    for name in public:
        assert getattr(moved, name) is getattr(target, name)


@pytest.mark.parametrize("old", sorted(drakit.MOVED_MODULES))
def test_no_old_path_is_a_real_module_any_more(old: str) -> None:
    assert importlib.util.find_spec(drakit.MOVED_MODULES[old]) is not None
    top_level = {m.name for m in pkgutil.iter_modules(drakit.__path__)}
    assert old.rsplit(".", 1)[1] not in top_level


def test_the_benchmark_harness_imports_still_work() -> None:
    """What ``../shared/peer`` imports from drakit, in a fresh interpreter."""
    code = (
        "from drakit.runtime import fast_tmp\n"
        "from drakit.cdi import CdiWriter\n"
        "from drakit.checkpoint import CheckpointStore\n"
        "from drakit.kube import KubeClient\n"
        "from drakit.kubelet.client import KubeletClient\n"
        "from drakit.models import ClaimRef\n"
    )
    subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], check=True)
