"""``admission.k8s.io/v1`` AdmissionReview: the request the API server sends, the answer.

The request and response models are the public ones of :mod:`drakit.admission` (what a
backend's pod mutator sees); only the fields drakit reads are modelled, the rest of the request
is ignored (``extra``).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from drakit.admission import AdmissionRequest, AdmissionResponse, GroupVersionKind

__all__ = ["AdmissionRequest", "AdmissionResponse", "GroupVersionKind", "parse_review", "to_review"]

API_VERSION = "admission.k8s.io/v1"


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
