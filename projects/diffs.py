"""Line diffs whose cost is bounded, for every face that compares texts someone wrote.

difflib's ``SequenceMatcher`` costs far more than the two lengths' product on text built
for it: lines each repeated just under its "popular" threshold (1% of the lines) made
16,000 lines of a spec body take a minute to diff, and an interdiff (``autojunk=False``)
of 16,000 lines over a minute too, in the request of whoever opened the page.

``Matcher`` is a ``SequenceMatcher`` whose matching blocks are difflib's own while the
two sequences are within the budget (``budget``: pairs of lines); past it, the common
first and last lines are matched, difflib matches the part between them if that is
within the budget, and otherwise that part is shown removed then added: a true diff,
not the shortest.
``unified_diff`` is ``difflib.unified_diff`` over it.
"""

import difflib
from collections.abc import Iterator, Sequence

# Pairs of lines difflib may compare: 500 by 500 lines while its "popular" heuristic
# is on (autojunk, and 200 lines or more on the right), else 250 by 250, for without it
# the cost grows with the cube of the lines (a few distinct lines, each repeated). Each
# took a tenth of a second at most on the shapes built to be slowest (bench/diffs.py).
BUDGET = 250_000
BUDGET_WITHOUT_AUTOJUNK = 62_500


def budget(matcher: difflib.SequenceMatcher, right: int) -> int:
    """The pairs of lines ``matcher`` may compare when its right side has ``right``."""
    return BUDGET if matcher.autojunk and right >= 200 else BUDGET_WITHOUT_AUTOJUNK


class Matcher(difflib.SequenceMatcher):
    """``difflib.SequenceMatcher`` with its work bounded by ``BUDGET`` (module docstring)."""

    def get_matching_blocks(self) -> list[difflib.Match]:
        if self.matching_blocks is not None:
            return self.matching_blocks
        a, b = self.a, self.b
        if len(a) * len(b) <= budget(self, len(b)):
            return super().get_matching_blocks()
        head, shorter = 0, min(len(a), len(b))
        while head < shorter and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < shorter - head and a[-1 - tail] == b[-1 - tail]:
            tail += 1
        end_a, end_b = len(a) - tail, len(b) - tail
        blocks = [difflib.Match(0, 0, head)] if head else []
        if (end_a - head) * (end_b - head) <= budget(self, end_b - head):
            inner = difflib.SequenceMatcher(
                self.isjunk, a[head:end_a], b[head:end_b], autojunk=self.autojunk
            )
            blocks += [
                difflib.Match(i + head, j + head, size)
                for i, j, size in inner.get_matching_blocks()
                if size
            ]
        if tail:
            blocks.append(difflib.Match(end_a, end_b, tail))
        blocks.append(difflib.Match(len(a), len(b), 0))
        self.matching_blocks = blocks
        return blocks


def unified_diff(
    a: Sequence[str],
    b: Sequence[str],
    fromfile: str = "",
    tofile: str = "",
    *,
    n: int = 3,
    lineterm: str = "\n",
) -> Iterator[str]:
    """``difflib.unified_diff(a, b, fromfile, tofile, n=n, lineterm=lineterm)``, bounded."""
    started = False
    for group in Matcher(None, a, b).get_grouped_opcodes(n):
        if not started:
            started = True
            yield f"--- {fromfile}{lineterm}"
            yield f"+++ {tofile}{lineterm}"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@{lineterm}"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])


def _range(start: int, stop: int) -> str:
    """A hunk header's range, as difflib writes it: "3" for one line, "2,0" for none."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"
