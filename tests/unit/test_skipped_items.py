"""``PluginContext.skipped``: items a backend leaves out, named, bounded, dropped once fixed."""

from __future__ import annotations

from drakit.context import MAX_REASONS, MAX_SKIPPED, SkippedItem, SkippedItems


def test_items_are_named_once_and_dropped_when_a_round_no_longer_names_them() -> None:
    told: list[SkippedItem] = []
    skipped = SkippedItems()
    skipped.listener = told.append
    skipped.begin_round()
    skipped.skip("device", "gpu3", "nvml-error", "NVML GPU 3: no handle")
    skipped.skip("health", "GPU-5", "not-supported", "off", lasting=True)
    skipped.end_round()
    assert [(i.kind, i.item) for i in told] == [("device", "gpu3"), ("health", "GPU-5")]
    skipped.begin_round()
    skipped.skip("device", "gpu3", "nvml-error", "NVML GPU 3: no handle")  # still bad: no news
    skipped.end_round()
    assert len(told) == 2
    assert skipped.counts() == {("device", "nvml-error"): 1, ("health", "not-supported"): 1}
    skipped.begin_round()
    skipped.skip("device", "gpu3", "unusable-answer", "changed")  # another cause: told again
    skipped.end_round()
    assert told[-1].reason == "unusable-answer"
    skipped.begin_round()  # gpu3 fixed; health watching stays off until restart
    skipped.end_round()
    assert [(i.kind, i.item) for i in skipped.items()] == [("health", "GPU-5")]


def test_reasons_and_items_are_bounded() -> None:
    skipped = SkippedItems()
    skipped.skip("label", "a", "Not A Word: {value}", "m")
    assert skipped.items()[0].reason == "other"  # a metric label is never free text
    for r in range(MAX_REASONS + 5):
        skipped.skip("device", f"d{r}", f"reason-{r}", "m")
    reasons = {i.reason for i in skipped.items()}
    assert len(reasons) <= MAX_REASONS + 1  # + "other"
    assert "reason-20" not in reasons
    for n in range(MAX_SKIPPED * 2):
        skipped.skip("label", f"label-{n}", "bad-value", "m")
    assert len(skipped.items()) == MAX_SKIPPED
    long = SkippedItems()
    long.skip("label", "k" * 5000, "bad-value", "x" * 5000)
    [item] = long.items()
    assert len(item.item) <= 253
    assert len(item.message) <= 900
