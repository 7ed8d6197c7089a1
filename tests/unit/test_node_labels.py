"""The Node labels ``drakit node`` keeps under ``topology.drakit.io/`` (``drakit.node.labels``)."""

from __future__ import annotations

import logging

import pytest

from drakit.node.labels import PREFIX, keep_failed, merge, patch_for

FABRIC = f"{PREFIX}fabric"
RAILS = f"{PREFIX}rails"


def test_merge_keeps_valid_labels_of_every_backend() -> None:
    got = merge({"amd_ainic": {FABRIC: "spine-a", RAILS: "8"}, "other": {f"{PREFIX}x": ""}})
    assert got == {FABRIC: "spine-a", RAILS: "8", f"{PREFIX}x": ""}


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("kubernetes.io/hostname", "n1", "drakit writes only keys topology.drakit.io/"),
        ("ainic.drakit.io/fabric", "a", "drakit writes only keys topology.drakit.io/"),
        (f"{PREFIX}bad key", "a", "drakit writes only keys topology.drakit.io/"),
        (f"{PREFIX}{'n' * 64}", "a", "drakit writes only keys topology.drakit.io/"),
        (FABRIC, "has space", "not a label value"),
        (FABRIC, "-leading", "not a label value"),
        (FABRIC, "v" * 64, "not a label value"),
    ],
)
def test_merge_leaves_out_one_bad_label_and_names_the_backend(
    key: str, value: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        got = merge({"acme": {key: value, RAILS: "2"}})
    assert got == {RAILS: "2"}  # the good one stays
    assert "backend acme" in caplog.text
    assert why in caplog.text


def test_merge_drops_a_key_two_backends_disagree_on(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        got = merge({"a": {FABRIC: "x", RAILS: "2"}, "b": {FABRIC: "y"}, "c": {FABRIC: "x"}})
    assert got == {RAILS: "2"}
    assert "backend a says 'x', backend b says 'y'" in caplog.text


def test_merge_keeps_a_key_two_backends_agree_on() -> None:
    assert merge({"a": {FABRIC: "x"}, "b": {FABRIC: "x"}}) == {FABRIC: "x"}


def test_patch_adds_changes_and_removes_only_drakit_keys() -> None:
    current = {
        "kubernetes.io/hostname": "n1",
        "ainic.drakit.io/fabric": "input-from-fabric-manager",
        FABRIC: "old",
        f"{PREFIX}stale": "1",
        RAILS: "2",
    }
    assert patch_for(current, {FABRIC: "new", RAILS: "2", f"{PREFIX}added": "y"}) == {
        FABRIC: "new",
        f"{PREFIX}added": "y",
        f"{PREFIX}stale": None,
    }


def test_patch_is_empty_when_the_node_already_carries_the_labels() -> None:
    assert patch_for({FABRIC: "a", "other": "x"}, {FABRIC: "a"}) == {}
    assert patch_for({"other": "x"}, {}) == {}


def test_a_backend_that_failed_this_round_keeps_its_last_labels() -> None:
    last = {"amd_ainic": {FABRIC: "a", RAILS: "8"}, "gone": {f"{PREFIX}x": "1"}}
    now = {"other": {f"{PREFIX}y": "2"}}
    assert keep_failed(now, last, ["amd_ainic"]) == {
        "other": {f"{PREFIX}y": "2"},
        "amd_ainic": {FABRIC: "a", RAILS: "8"},
    }
    # one that did not fail and returned nothing loses its labels
    assert keep_failed(now, last, []) == now
    # a backend that never labelled has nothing to keep
    assert keep_failed({}, {}, ["amd_ainic"]) == {}
