"""Allocated claims for the integration tests' claim source (the ``claims`` fixture), and a
pipeline that reads them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from drakit.host.pluginhost import PluginHost
from drakit.models import ClaimRef
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore

NODE = "node-a"
"""The simulated node of the ``host`` fixture; also its pool."""
GPU = "gpu.nvidia.drakit.io"


def claim(
    claims: ClaimStore,
    results: list[dict[str, Any]],
    config: list[dict[str, Any]] | None = None,
    name: str | None = None,
) -> ClaimRef:
    """Store a claim in namespace ``ns`` allocated to ``results`` (and ``config``); its ref."""
    uid = str(uuid.uuid4())
    name = name or f"c-{uid[:8]}"
    claims.add(
        {
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": results, "config": config or []}}},
        }
    )
    return ClaimRef(namespace="ns", name=name, uid=uid)


def make_state(
    host: PluginHost,
    claims: ClaimStore,
    root: Path,
    driver: str = GPU,
    boot_id: str = "boot-1",
    repairs: list[tuple[str, int]] | None = None,
    *,
    device_metadata: bool = True,
    **options: Any,
) -> DriverState:
    """A pipeline for ``driver`` with its state and CDI directories under ``root``.

    Args:
        host: The plugin host.
        claims: Where it GETs claims.
        root: Holds ``state/`` and ``cdi/``.
        driver: The DRA driver.
        boot_id: The boot it believes it runs in.
        repairs: Gets ``(reason, count)`` for every checkpoint repair.
        device_metadata: Write KEP-5304 files (on here, so the pipeline tests cover them).
        options: Further ``DriverState`` keywords (``device_root``, ``device_root_mount``).
    """

    def on_repair(reason: str, _msg: str, n: int) -> None:
        if repairs is not None:
            repairs.append((reason, n))

    return DriverState(
        driver,
        host,
        claims,
        state_dir=root / "state",
        cdi_dir=root / "cdi",
        boot_id=boot_id,
        on_repair=on_repair if repairs is not None else None,
        device_metadata=device_metadata,
        **options,
    )
