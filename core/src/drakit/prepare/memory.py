"""The in-memory claim source: the API server's stand-in where there is no cluster.

:class:`ClaimStore` is the one in-memory :class:`drakit.prepare.pipeline.ClaimSource`: the demo
(``drakit demo``) serves its claims from one, the test kit re-exports it
(``drakit.testing.ClaimStore``, what a :class:`drakit.testing.RunningNode` reads), and the
benchmarks measure the prepare path against one. It lives here, beside the claim source it
stands in for, because both production commands and the test kit use it (commands may not
import the test kit).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from drakit.errors import PermanentError

__all__ = ["DEFAULT_NAMESPACE", "ClaimStore"]

DEFAULT_NAMESPACE = "default"
"""The namespace of a stored claim whose metadata names none."""


class ClaimStore:
    """An in-memory claim source: ResourceClaim dicts by namespace and name.

    Args:
        copy: Return a deep copy from :meth:`get_resource_claim`, as a GET from the API server
            returns a fresh object (the default). ``False`` returns the stored dict itself,
            for callers that never change what they get and want no copying on the prepare
            path they measure (the benchmarks).

    Attributes:
        claims: ``(namespace, name)`` -> the stored claim; a test may change or clear it to
            stand for a change in the API server.
    """

    def __init__(self, *, copy: bool = True) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self._copy = copy
        self._lock = threading.Lock()

    def add(self, claim: dict[str, Any]) -> None:
        """Store (or replace) a ResourceClaim dict under its namespace and name."""
        meta = claim["metadata"]
        with self._lock:
            self.claims[(meta.get("namespace", DEFAULT_NAMESPACE), meta["name"])] = claim

    def remove(self, claim: dict[str, Any]) -> None:
        """Forget a claim (as if it was deleted); unknown claims are ignored."""
        meta = claim["metadata"]
        with self._lock:
            self.claims.pop((meta.get("namespace", DEFAULT_NAMESPACE), meta["name"]), None)

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The stored claim (a deep copy unless the store was made with ``copy=False``).

        Raises:
            PermanentError: no such claim (the API server's 404).
        """
        with self._lock:
            claim = self.claims.get((namespace, name))
        if claim is None:
            raise PermanentError(f"resourceclaims {namespace}/{name} not found")
        if not self._copy:
            return claim
        copy: dict[str, Any] = json.loads(json.dumps(claim))
        return copy
