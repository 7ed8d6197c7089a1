"""The Node labels ``drakit node`` keeps: ``topology.drakit.io/*``, from the backends.

Backends say where the node sits in the cluster's fabric through ``drakit_node_labels``
(the AINIC backend: ``topology.drakit.io/fabric`` and ``topology.drakit.io/rails``). drakit owns
the prefix ``topology.drakit.io/``: after each discovery round the Node's labels under it are
made equal to what the backends returned (added, changed, removed) with one merge patch that
names only those keys, so no other label is ever touched. Topology-aware schedulers read them
(``docs/multi-node.md``).

:func:`merge` checks and merges the backends' answers (pure); :func:`patch_for` is the change
to send; :class:`LabelKeeper` sends it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from drakit.errors import DrakitError

if TYPE_CHECKING:
    from drakit.kube import KubeClient  # the Kubernetes client loads only where a node has one

__all__ = ["PREFIX", "LabelKeeper", "keep_failed", "merge", "patch_for"]

log = logging.getLogger(__name__)

PREFIX = "topology.drakit.io/"
"""The label prefix drakit owns on every Node it runs on."""

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def merge(contributed: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The labels to keep, from each backend's answer (backend -> labels).

    A key outside :data:`PREFIX`, a name or value that is not a valid label name or value, or
    a key two backends give different values is left out with a warning that names the
    backend(s) and the fix; the other labels are kept.
    """
    out: dict[str, str] = {}
    by: dict[str, str] = {}
    clashed: set[str] = set()
    for plugin, labels in contributed.items():
        for key, value in labels.items():
            name = key[len(PREFIX) :] if key.startswith(PREFIX) else None
            if name is None or not _NAME.match(name):
                log.warning(
                    "backend %s: node label %r left out: drakit writes only keys "
                    "topology.drakit.io/<name> (a label name of 1 to 63 characters)",
                    plugin,
                    key[:80],
                )
                continue
            if not _VALUE.match(value):
                log.warning(
                    "backend %s: node label %s=%r left out: not a label value (at most 63 "
                    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
                    plugin,
                    key,
                    value[:80],
                )
                continue
            if key in out and out[key] != value:
                log.warning(
                    "node label %s left out: backend %s says %r, backend %s says %r",
                    key,
                    by[key],
                    out[key],
                    plugin,
                    value,
                )
                clashed.add(key)
                continue
            out[key], by[key] = value, plugin
    for key in clashed:
        out.pop(key, None)
    return out


def keep_failed(
    parts: Mapping[str, Mapping[str, str]],
    last: Mapping[str, Mapping[str, str]],
    failed: Iterable[str],
) -> dict[str, dict[str, str]]:
    """This round's labels per backend, with the last ones of each backend in ``failed``.

    A backend whose discovery failed this round has no devices to derive labels from; its
    last labels stay, so a passing failure does not take the node out of its domain.
    """
    out = {k: dict(v) for k, v in parts.items()}
    for plugin in failed:
        if plugin in last:
            out[plugin] = dict(last[plugin])
    return out


def patch_for(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    """The labels to change (``None``: remove) so the Node's ``PREFIX`` labels are ``desired``."""
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    patch.update({k: None for k in current if k.startswith(PREFIX) and k not in desired})
    return patch


class LabelKeeper:
    """Keeps one Node's ``topology.drakit.io/`` labels equal to what the backends say.

    Args:
        kube: The API client.
        node: The Node's name.
    """

    def __init__(self, kube: KubeClient, node: str) -> None:
        self.kube = kube
        self.node = node

    def sync(self, current: Mapping[str, str], desired: Mapping[str, str]) -> bool:
        """Patch the Node when its labels under the prefix differ from ``desired``.

        ``current``: the Node's labels as last read. An API error is logged and the next
        round tries again; returns whether the Node now carries ``desired``.
        """
        patch = patch_for(current, desired)
        if not patch:
            return True
        try:
            self.kube.patch_node_labels(self.node, patch)
        except DrakitError as e:
            log.warning("could not write the Node's topology labels (next round retries): %s", e)
            return False
        log.info(
            "Node %s topology labels: %s",
            self.node,
            ", ".join(
                f"{k}={v}" if v is not None else f"{k} removed" for k, v in sorted(patch.items())
            ),
        )
        return True

    def remove(self, current: Mapping[str, str]) -> bool:
        """Remove every label under the prefix (``topology_labels.remove_on_exit``)."""
        return self.sync(current, {})
