"""``admission.k8s.io/v1`` AdmissionReview: the request the API server sends, the answer.

The request and response models are the public ones of :mod:`drakit.admission` (what a
backend's pod mutator sees); only the fields drakit reads are modelled, the rest of the request
is ignored (``extra``).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from drakit.admission import AdmissionRequest, AdmissionResponse, GroupVersionKind

__all__ = [
    "MAX_DEPTH",
    "TOO_DEEP",
    "AdmissionRequest",
    "AdmissionResponse",
    "GroupVersionKind",
    "loads_bounded",
    "parse_review",
    "to_review",
]

MAX_DEPTH = 64
"""Objects and lists deeper than this in a review decoded by :func:`loads_bounded` are cut."""


class _TooDeep(str):
    """Stands for a subtree cut by :func:`loads_bounded` (a ``str`` so models keep it)."""

    __slots__ = ()


TOO_DEEP = _TooDeep("<nested too deeply>")
"""What :func:`loads_bounded` puts where it cut a subtree."""

_TOKEN = re.compile(
    r'[ \t\n\r]*(?:(")|([\[\]{},:])|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(true|false|null))'
)
_LITERALS = {"true": True, "false": False, "null": None}


def loads_bounded(body: bytes | str, max_depth: int = MAX_DEPTH) -> Any:  # noqa: PLR0912, PLR0915 - one token loop, kept whole as a scanner is
    """JSON decoded without recursion, subtrees below ``max_depth`` replaced by :data:`TOO_DEEP`.

    Everything else decodes as :func:`json.loads` would. It is the fallback for a review that
    :func:`json.loads` cannot decode for its depth alone, and is lenient about separators.

    Another driver's opaque configuration may nest deeper than Python's recursion allows; the
    API server accepts it, so the webhook must admit it. What drakit itself validates is never
    that deep (32 levels), so a cut subtree inside a drakit configuration is refused by depth.

    Raises:
        ValueError: not JSON.
    """
    text = body.decode() if isinstance(body, bytes) else body
    stack: list[tuple[Any, str | None]] = []  # (container, pending key of an object)
    root: list[Any] = []
    skip = 0  # nesting depth inside a cut subtree
    pos, end = 0, len(text)
    expect_key = False
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip() == "" and root and not stack:
                return root[0]
            raise ValueError(f"not JSON at character {pos}")
        pos = m.end()
        quote, punct, number, literal = m.groups()
        if quote:
            value, pos = json.decoder.scanstring(text, pos)  # type: ignore[attr-defined]
        elif number is not None:
            value = json.loads(number)
        elif literal is not None:
            value = _LITERALS[literal]
        elif punct in "[{":
            if skip or len(stack) >= max_depth:
                skip += 1
                continue
            stack.append(([] if punct == "[" else {}, None))
            expect_key = punct == "{"
            continue
        elif punct in "]}":
            if skip:
                skip -= 1
                if skip == 0:
                    value = TOO_DEEP
                else:
                    continue
            else:
                if not stack:
                    raise ValueError(f"unbalanced {punct!r} at character {pos}")
                value = stack.pop()[0]
        else:  # , or :
            if not skip and stack and isinstance(stack[-1][0], dict):
                expect_key = punct == ","
            continue
        if skip:
            continue
        if not stack:
            if root:
                raise ValueError(f"extra data at character {pos}")
            root.append(value)
            if pos >= end or not text[pos:].strip():
                return value
            continue
        container, key = stack[-1]
        if isinstance(container, list):
            container.append(value)
        elif expect_key and key is None and isinstance(value, str) and value is not TOO_DEEP:
            stack[-1] = (container, value)
            expect_key = False
        else:
            if key is None:
                raise ValueError(f"an object member without a key at character {pos}")
            container[key] = value
            stack[-1] = (container, None)


API_VERSION = "admission.k8s.io/v1"


def parse_review(body: bytes) -> AdmissionRequest:
    """The request inside an AdmissionReview body.

    Raises:
        ValueError: not JSON, not an ``admission.k8s.io/v1`` AdmissionReview, or no request.
    """
    try:
        doc = json.loads(body)
    except RecursionError:  # valid to the API server (it accepts far deeper objects)
        doc = loads_bounded(body)
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
