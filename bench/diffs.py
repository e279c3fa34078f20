"""The slowest line diffs we know how to build, through projects.diffs and through
difflib as it was, so that the budget's bound can be seen.

    uv run python bench/diffs.py

Texts of a few distinct lines, each repeated (just under difflib's "popular" threshold,
or few enough that autojunk does not apply), diffed against a reordering of themselves.
The bounded matcher's worst case within its budgets, then the texts past them that
difflib needed seconds to a minute for (each plain difflib run takes that long).
Prints JSON.
"""

import difflib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from projects.diffs import Matcher


def shape(la: int, lb: int, distinct: int, step: int) -> tuple[list[str], list[str]]:
    return (
        [f"l{i % distinct}" for i in range(la)],
        [f"l{(i * step) % distinct}" for i in range(lb)],
    )


def seconds(matcher_class, a, b, autojunk: bool) -> float:
    started = time.perf_counter()
    list(matcher_class(None, a, b, autojunk=autojunk).get_grouped_opcodes(3))
    return round(time.perf_counter() - started, 4)


def worst(la: int, lb: int, autojunk: bool) -> dict:
    cases = [
        (seconds(Matcher, *shape(la, lb, d, s), autojunk), d, s)
        for d in (2, 3, 4, 6, 10, 20, 40, 80, 120, 180)
        for s in (3, 7, 13)
    ]
    spent, distinct, step = max(cases)
    return {
        "lines": [la, lb],
        "autojunk": autojunk,
        "worst_seconds": spent,
        "distinct": distinct,
        "step": step,
    }


def main() -> None:
    within = [
        worst(500, 500, True),
        worst(1250, 200, True),
        worst(250, 250, False),
        worst(312, 199, True),
    ]
    past = []
    for lines, distinct, autojunk in ((16000, 177, True), (16000, 106, True), (8000, 53, False)):
        a, b = shape(lines, lines, distinct, 7)
        row = {"lines": lines, "distinct": distinct, "autojunk": autojunk}
        row["bounded_seconds"] = seconds(Matcher, a, b, autojunk)
        row["difflib_seconds"] = seconds(difflib.SequenceMatcher, a, b, autojunk)
        past.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({"within_budget": within, "past_budget": past}, indent=2))


if __name__ == "__main__":
    main()
