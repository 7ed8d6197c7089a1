"""The backend selections this distribution ships (``drakit.presets`` entry points).

Plain data, importing nothing: core reads them at start-up (``drakit.host.presets``).

* ``DEFAULT``: the backends enabled, in this order, when the configuration names none (those
  of them installed): every backend of drakit's workspace, the composite last.
* ``DEMO``: what ``drakit demo`` runs: the H200 machine with 8 AINICs, its GPUs, NICs and pairs
  under one driver (``docs/composite.md``), and the CPUs. Both GPU backends are in it, so that
  ``drakit demo --profile P`` shows the accelerators of every profile (an MI300X machine's AMD
  GPUs and their pairs too); a backend that finds no hardware of its kind publishes nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT", "DEFAULT_BACKENDS", "DEMO", "DEMO_PROFILE", "PAIRS_DRIVER"]

DEFAULT_BACKENDS = ("cpu", "nvidia_gpu", "amd_gpu", "amd_ainic", "composite")
DEFAULT: dict[str, Any] = {"plugins": {name: {} for name in DEFAULT_BACKENDS}}

DEMO_PROFILE = "h200-8gpu-8ainic"
PAIRS_DRIVER = "pairs.composite.drakit.io"
"""The driver the GPUs, NICs and pairs share in the demo (``docs/composite.md``)."""
DEMO: dict[str, Any] = {
    "profile": DEMO_PROFILE,
    "plugins": {
        "cpu": {"policy": "packed"},
        "nvidia_gpu": {"driver": PAIRS_DRIVER},
        "amd_gpu": {"driver": PAIRS_DRIVER},
        "amd_ainic": {"driver": PAIRS_DRIVER},
        "composite": {"strategy": "numa-preferred", "driver": PAIRS_DRIVER},
    },
}
