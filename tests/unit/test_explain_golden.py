"""The allocator and ``explain`` answer as they did before their fleet-scale work.

``explain_golden.outcomes()`` (small fleets whose nodes publish devices of the same content
under different names: generated scenarios with capacities, counters, taints, constraints,
and drakit's composite shape) against the outcomes recorded before the caches keyed by device
content and the per-set counter checks went in: allocations and every reason, word for word.
"""

from __future__ import annotations

import json

from tests.unit.explain_golden import GOLDEN, outcomes


def test_results_and_reasons_are_unchanged() -> None:
    want = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(outcomes(), sort_keys=True))
    assert got["drakit"] == want["drakit"]
    for i, (g, w) in enumerate(zip(got["scenarios"], want["scenarios"], strict=True)):
        assert g == w, f"scenario {i} ({w['kind']})"
