"""drakit's contract suite (:class:`drakit.testing.BackendContract`) run against this backend."""

from __future__ import annotations

from typing import Any, ClassVar

from drakit.testing import BackendContract

PAIRS_DRIVER = "pairs.composite.drakit.io"  # the composite's default driver


class TestCompositeContract(BackendContract):
    plugin = "composite"
    profile = "h200-8gpu-8ainic"
    other_plugins: ClassVar[dict[str, dict[str, Any]]] = {
        # members and pairs share one driver, so pairs and lone members share counters
        "nvidia_gpu": {"health_watch": False, "driver": PAIRS_DRIVER},
        "amd_ainic": {"driver": PAIRS_DRIVER},
    }
