"""Put benchmark result files side by side: one Markdown row per figure, value and ratio per run.

Usage::

    uv run python benchmarks/compare.py benchmarks/results/A.json benchmarks/results/B.json

Judge a change by the ratio columns: the absolute values follow the machine's load, the ratios
much less (each is taken against a baseline measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def fmt(v: float | None) -> str:
    """A number with about three significant digits (no exponent above 0.001)."""
    if v is None:
        return "-"
    a = abs(v)
    for limit, spec in ((100, ".0f"), (10, ".1f"), (1, ".2f"), (0.01, ".3f")):
        if a >= limit:
            return format(v, spec)
    return format(v, ".3g")


def compare(docs: list[dict[str, Any]], labels: list[str]) -> str:
    """The Markdown table: figure, unit, baseline, then value and ratio of each run."""
    rows: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    units: dict[tuple[str, str], tuple[str, str]] = {}
    for i, doc in enumerate(docs):
        for f in doc["figures"]:
            key = (f["bench"], f["name"])
            rows.setdefault(key, {})[i] = f
            units[key] = (f["unit"], f["baseline"] or "-")
    head = "| benchmark | figure | unit | baseline |" + "".join(
        f" {lab} value | {lab} ratio |" for lab in labels
    )
    sep = "|---|---|---|---|" + "---:|---:|" * len(labels)
    lines = [head, sep]
    for key, per_run in rows.items():
        unit, base = units[key]
        cells = "".join(
            f" {fmt(per_run[i]['value']) if i in per_run else '-'} |"
            f" {fmt(per_run[i]['ratio']) if i in per_run else '-'} |"
            for i in range(len(docs))
        )
        lines.append(f"| {key[0]} | {key[1]} | {unit} | {base} |{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the comparison of the given result files."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("results", type=Path, nargs="+", help="result JSON files of run.py")
    ap.add_argument("--labels", help="comma-separated column labels (default: file stems)")
    args = ap.parse_args(argv)
    docs = [json.loads(p.read_text()) for p in args.results]
    labels = args.labels.split(",") if args.labels else [p.stem for p in args.results]
    if len(labels) != len(docs):
        ap.error("give one label per result file")
    print(compare(docs, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
