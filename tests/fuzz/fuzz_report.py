"""Group a fuzz run's bad cases into classes, one line each with a count and a repro:

    python tests/fuzz/fuzz_report.py [build/fuzz/results.jsonl]

A class is (kind of store, mutation operator, the mutated array or file's last part, verdict,
error classes): the same bug usually shows under one class, whatever the seed.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

BAD = ("untyped", "wrong", "crash", "hang", "harness")


def classes(records: list[dict[str, Any]]) -> list[tuple[int, tuple[str, ...], dict[str, Any]]]:
    """(count, class, first record) for each class of bad case, most frequent first."""
    counts: Counter[tuple[str, ...]] = Counter()
    first: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in records:
        if r["verdict"] not in BAD and not r.get("split"):
            continue
        m = r.get("mutation", {})
        target = str(m.get("array") or m.get("file") or "").rsplit("/", 1)[-1].split("__")[-1]
        errors = sorted(
            {v.get("error", "").rsplit(".", 1)[-1] for v in r.get("modes", {}).values()} - {""}
        )
        split = "split" if r.get("split") else ""
        key = (r["kind"], str(m.get("op", "?")), target, r["verdict"], split, ",".join(errors))
        counts[key] += 1
        first.setdefault(key, r)
    return [(n, k, first[k]) for k, n in counts.most_common()]


def main(path: Path) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for n, key, r in classes(records):
        print(f"{n:4d}  {' '.join(k for k in key if k)}")
        for mode, v in r.get("modes", {}).items():
            detail = v.get("message", "")[-220:] or v.get("differs", "")
            print(
                f"        {mode}: {v['verdict']} {v.get('error', '')} {detail}".replace("\n", " ")
            )
        print(f"        {r.get('repro', r.get('detail'))}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "build/fuzz/results.jsonl"))
