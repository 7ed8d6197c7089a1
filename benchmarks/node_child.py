"""A drakit node without a cluster, for the RSS benchmark when ``--cluster`` is not given.

Run as a script: ``python benchmarks/node_child.py ROOT PORT BACKENDS``. It starts
:class:`drakit.node.daemon.Node` on the ``h200-8gpu-8ainic`` profile with ``BACKENDS``
(comma-separated names; :data:`benchmarks.rss.BACKENDS` when run by the benchmark), the kubelet
sockets and the probe server on ``127.0.0.1:PORT``, and claims from
a :class:`drakit.prepare.memory.ClaimStore` (no API server, so no publisher), then serves until
SIGTERM. It is what ``drakit node`` runs minus the Kubernetes client and the publisher.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from drakit.host.settings import DrakitSettings
from drakit.node.daemon import Node
from drakit.prepare.memory import ClaimStore


def main(argv: list[str]) -> None:
    """Start the node and block until SIGTERM."""
    root, port, backends = Path(argv[1]), int(argv[2]), argv[3].split(",")
    logging.basicConfig(level=logging.WARNING)
    (root / "kubelet" / "plugins_registry").mkdir(parents=True, exist_ok=True)
    settings = DrakitSettings(
        profile="h200-8gpu-8ainic",
        plugins={name: {} for name in backends},
        node_name="bench-rss",
        kubelet_dir=root / "kubelet",
        cdi_dir=root / "cdi",
        state_dir=root / "state",
        metrics={"enabled": True, "address": "127.0.0.1", "port": port},
        log_level="WARNING",
    )
    Node(settings, claims=ClaimStore(copy=False), boot_id="bench-boot", instance_id="rss").run()


if __name__ == "__main__":
    main(sys.argv)
