"""The AMD GPU backend's prepare: ``/dev/kfd`` plus the card and render nodes of each device.

No environment: KFD shows a container only the GPUs whose render nodes it may open. Prepare
changes nothing on the node, so unprepare has nothing to undo.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from drakit.models import CdiDeviceNode, CdiEdits, ClaimInfo, PreparedDevice
from drakit.preparekit import prepared_device, published_device
from drakit_amd_gpu.devices import Published

__all__ = ["prepare_devices"]


def prepare_devices(
    published: Mapping[str, Published], root: Path, claim: ClaimInfo
) -> list[PreparedDevice]:
    """``/dev/kfd`` and the allocated GPU's or partition's card and render nodes.

    ``published`` is the last discovery round's device name -> GPU (or partition).
    """
    out = []
    for dev in claim.devices:
        target = published_device(
            published,
            dev.device,
            f"claim {claim.namespace}/{claim.name} request {dev.request!r}: "
            f"{dev.device!r} is not an AMD GPU on this node",
        )
        nodes = [CdiDeviceNode(path="/dev/kfd")]
        renders = [n.render_minor for n in target.nodes] or (
            [target.gpu.render_minor] if target.gpu.render_minor is not None else []
        )
        for minor in renders:
            card = target.gpu.card_of(root, minor)
            if card is not None:
                nodes.append(CdiDeviceNode(path=f"/dev/dri/card{card}"))
            nodes.append(CdiDeviceNode(path=f"/dev/dri/renderD{minor}"))
        out.append(
            prepared_device(
                dev,
                edits=CdiEdits(device_nodes=tuple(nodes)),
                state={"bdf": target.gpu.fn.bdf, "render_minors": renders},
            )
        )
    return out
