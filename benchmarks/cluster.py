"""The real control plane for ``--cluster`` runs, and where benchmark claims are stored.

The control plane is :class:`tests.e2e.controlplane.ControlPlane` (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler as plain processes on loopback), with its run directory
in ``/dev/shm`` so that etcd does not compete with the other engineers' disk traffic.

Claims are created the way a scheduler leaves them: a ResourceClaim with ``spec.devices``, then
``status.allocation`` written through the ``/status`` subresource (as admin). The prepare
pipeline then GETs exactly what it would GET on a real node.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.claims import NAMESPACE, claim_spec
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, resolve_bin_dir

from drakit.host.startup import fast_tmp
from drakit.models import ClaimRef

__all__ = ["ApiClaims", "find_bin_dir", "start_control_plane"]


class ApiClaims:
    """Claims in the real API server: POST the claim, then PUT its status as admin."""

    source = "apiserver"

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        try:
            cp.api(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
        except ControlPlaneError as exc:
            if "409" not in str(exc):
                raise

    def add(self, name: str, results: Sequence[dict[str, Any]]) -> ClaimRef:
        """Create the claim and write ``status.allocation`` through ``/status``."""
        base = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
        created = self.cp.api(
            "POST",
            base,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": claim_spec(results),
            },
        )
        created["status"] = {"allocation": {"devices": {"results": list(results)}}}
        stored = self.cp.api("PUT", f"{base}/{name}/status", created)
        return ClaimRef(namespace=NAMESPACE, name=name, uid=stored["metadata"]["uid"])


def find_bin_dir(given: Path | None) -> Path:
    """The control-plane binaries: ``--bin-dir``, else ``DRAKIT_K8S_BIN_DIR`` or the build cache.

    Nothing is built here (a cold build takes 15-30 minutes); run
    ``hack/control-plane/build.sh`` first.

    Raises:
        ControlPlaneError: no usable directory (the message says how to get one).
    """
    if given is not None:
        missing = [
            b
            for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
            if not (given / b).exists()
        ]
        if missing:
            raise ControlPlaneError(f"{given} lacks {', '.join(missing)}")
        return given
    return resolve_bin_dir(build=False)


def start_control_plane(bin_dir: Path) -> ControlPlane:
    """Start a control plane whose state and logs live in a fresh directory under /dev/shm."""
    run_dir = Path(tempfile.mkdtemp(prefix="drakit-bench-cp-", dir=fast_tmp()))
    cp = ControlPlane(bin_dir, run_dir)
    cp.start()
    return cp
