"""``admission.k8s.io/v1`` AdmissionReview: the request the API server sends, the answer.

Only the fields drakit reads are modelled; the rest of the request is ignored (``extra``).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AdmissionRequest", "AdmissionResponse", "GroupVersionKind", "parse_review", "to_review"]

API_VERSION = "admission.k8s.io/v1"


class GroupVersionKind(BaseModel):
    """``request.kind``: what the object is."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(BaseModel):
    """``AdmissionReview.request``."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    uid: str
    kind: GroupVersionKind
    operation: str = "CREATE"
    namespace: str = ""
    name: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionResponse(BaseModel):
    """What the engine answers: allowed or refused (with a message), an optional JSON patch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed: bool = True
    message: str = ""
    code: int = 403
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def refuse(cls, message: str, code: int = 400) -> AdmissionResponse:
        """Refused: the API server returns ``message`` to the client (``kubectl apply``)."""
        return cls(allowed=False, message=message, code=code)


def parse_review(body: bytes) -> AdmissionRequest:
    """The request inside an AdmissionReview body.

    Raises:
        ValueError: not JSON, not an ``admission.k8s.io/v1`` AdmissionReview, or no request.
    """
    doc = json.loads(body)
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview":
        raise ValueError("expected an AdmissionReview object")
    if doc.get("apiVersion") != API_VERSION:
        raise ValueError(f"expected apiVersion {API_VERSION}, got {doc.get('apiVersion')!r}")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise ValueError("the AdmissionReview has no request")
    return AdmissionRequest.model_validate(req)


def to_review(uid: str, response: AdmissionResponse) -> dict[str, Any]:
    """The AdmissionReview JSON answering request ``uid``."""
    out: dict[str, Any] = {"uid": uid, "allowed": response.allowed}
    if not response.allowed:
        out["status"] = {"code": response.code, "message": response.message}
    if response.patch:
        raw = json.dumps(list(response.patch), separators=(",", ":")).encode()
        out["patchType"] = "JSONPatch"
        out["patch"] = base64.b64encode(raw).decode("ascii")
    if response.warnings:
        out["warnings"] = list(response.warnings)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": out}
