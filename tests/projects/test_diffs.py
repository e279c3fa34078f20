"""Line diffs with a bounded cost (projects.diffs): difflib's own answer within the
budget, and past it the changed middle removed then added, on every face that diffs."""

import difflib
import random

import pytest

from decisions.selectors import body_diff
from projects import diffs
from projects.diffs import Matcher, unified_diff


def shapes():
    """Pairs of texts of few lines, varied: equal, empty, moved, repeated, changed."""
    rng = random.Random(7)
    pairs = [([], []), (["a"], []), ([], ["a"]), (["a", "b"], ["a", "b"])]
    for _ in range(200):
        words = [f"w{n}" for n in range(rng.randrange(1, 6))]
        pairs.append(
            (
                [rng.choice(words) for _ in range(rng.randrange(0, 30))],
                [rng.choice(words) for _ in range(rng.randrange(0, 30))],
            )
        )
    return pairs


@pytest.mark.parametrize("lineterm", ["", "\n"])
def test_within_the_budget_the_diff_is_difflibs_own(lineterm):
    for a, b in shapes():
        assert list(unified_diff(a, b, "v1", "v2", lineterm=lineterm)) == list(
            difflib.unified_diff(a, b, "v1", "v2", lineterm=lineterm)
        )


def rebuilt(a, b, matcher):
    """``b`` rebuilt from ``a`` by the matcher's opcodes: a true diff rebuilds it."""
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        out += a[i1:i2] if tag == "equal" else b[j1:j2]
    return out


def small_budget(monkeypatch) -> None:
    monkeypatch.setattr(diffs, "BUDGET", 50)
    monkeypatch.setattr(diffs, "BUDGET_WITHOUT_AUTOJUNK", 50)


def test_past_the_budget_the_changed_middle_is_removed_then_added(monkeypatch):
    small_budget(monkeypatch)
    # 8 by 9 changed lines, over the budget of 50 pairs; difflib would match the "s" lines.
    old = ["a0", "s", "a1", "s", "a2", "s", "a3", "s"]
    new = ["b0", "s", "b1", "s", "b2", "s", "b3", "s", "b4"]
    a, b = ["title", "intro", *old, "end"], ["title", "intro", *new, "end"]

    lines = list(unified_diff(a, b, "v1", "v2", n=1, lineterm=""))

    assert lines == [
        "--- v1",
        "+++ v2",
        "@@ -2,10 +2,11 @@",
        " intro",
        *[f"-{line}" for line in old],
        *[f"+{line}" for line in new],
        " end",
    ]
    assert rebuilt(a, b, Matcher(None, a, b)) == b


def test_past_the_budget_a_small_changed_middle_is_still_diffed_by_difflib(monkeypatch):
    small_budget(monkeypatch)
    a = [f"line {n}" for n in range(20)]
    b = [*a[:9], "inserted", *a[9:12], *a[13:]]

    assert list(unified_diff(a, b, lineterm="")) == list(difflib.unified_diff(a, b, lineterm=""))


def test_a_spec_bodys_diff_is_bounded(monkeypatch):
    # Spec pages and a decision's impact diff bodies that managers and, through an
    # accepted amendment, agents wrote: 16,000 lines built for difflib took a minute.
    small_budget(monkeypatch)
    old = "\n".join(["# Spec", "a0", "s", "a1", "s", "a2", "s", "a3", "s", "end"])
    new = "\n".join(["# Spec", "b0", "s", "b1", "s", "b2", "s", "b3", "s", "b4", "end"])

    kinds = [kind for kind, _ in body_diff(old, new, "v1", "v2")]

    assert kinds == ["hunk", "hunk", "hunk", "ctx", *["del"] * 8, *["add"] * 9, "ctx"]
