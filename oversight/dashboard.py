"""The manager dashboard: throughput, first-pass yield, gate failure rate, review latency.

Reads only. Everything is computed from the audit trail (``Event``) and the gate runs,
over the last ``weeks`` ISO weeks (Monday to Sunday, in the site's time zone) up to
``now``. The cost is two queries whatever the size of the history: one over the review
events of the window (each row carrying, from correlated subqueries, when its task
entered review and whether an earlier attempt was failed or rejected) and one
aggregate over the gate runs that finished in the window.

The charts are inline SVG built here, not in the browser: the page works without
JavaScript, and the site's Content-Security-Policy (no inline styles or scripts) holds
because the SVG uses only classes from ``static/css/app.css`` and presentation attributes.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.contrib.contenttypes.models import ContentType
from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from evidence.models import GateRun, GateRunState
from projects.models import Event
from tasks.models import Attempt, AttemptState, Task

REVIEW_TRANSITIONS = ("approve", "reject")
FAILED_GATE_STATES = (GateRunState.FAILED, GateRunState.ERROR)
FINISHED_GATE_STATES = (GateRunState.PASSED, *FAILED_GATE_STATES)
# Attempts that reached a verdict and lost it: the work had to be done again.
REWORK_ATTEMPT_STATES = (AttemptState.FAILED, AttemptState.REJECTED)
NO_DATA = "no data yet"


@dataclass
class Week:
    """One ISO week of the window and its figures."""

    start: date
    approved: int = 0
    first_pass: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def iso(self) -> str:
        year, week, _ = self.start.isocalendar()
        return f"{year}-W{week:02d}"

    @property
    def label(self) -> str:
        return f"W{self.start.isocalendar()[1]:02d}"

    @property
    def first_pass_pct(self) -> float | None:
        return 100 * self.first_pass / self.approved if self.approved else None

    @property
    def latency_p50(self) -> float | None:
        return percentile(self.latencies, 50)


def dashboard_context(*, project_ids: list[int], weeks: int = 12, now=None) -> dict:
    """The dashboard's figures and charts for ``project_ids`` over the last ``weeks`` ISO weeks.

    The window runs from Monday 00:00 of the oldest week to ``now`` (default: the current
    time); the weeks are listed oldest first, weeks without activity included. Figures:

    - **throughput**: tasks approved (the task's ``approve`` event) per week;
    - **first-pass yield**: of the tasks approved in the window, the share approved
      without any earlier attempt of the task having been failed by its gates or
      rejected in review (released, abandoned or blocked attempts reached no verdict
      and do not count against it);
    - **gate failure rate by gate**: of the gate runs that finished in the window, the
      share that ended ``failed`` or ``error`` (a crashed gate counts as a failure);
    - **review latency**: for each approval or rejection in the window, the time from
      the task's ``gates_passed`` event (it entered review) to that verdict; p50 and p90
      are nearest-rank percentiles (the smallest latency that at least 50% / 90% of the
      reviews did not exceed).
    """
    weeks = max(1, int(weeks))
    now = now or timezone.now()
    start = window_start(weeks, now)
    first_day = timezone.localtime(start).date()
    buckets = [Week(start=first_day + timedelta(weeks=i)) for i in range(weeks)]

    def week_of(moment) -> Week:
        return buckets[(timezone.localtime(moment).date() - first_day).days // 7]

    latencies = []
    for transition, reviewed_at, ready_at, reworked in _review_rows(project_ids, start, now):
        week = week_of(reviewed_at)
        if transition == "approve":
            week.approved += 1
            week.first_pass += not reworked
        if ready_at is not None:
            seconds = (reviewed_at - ready_at).total_seconds()
            week.latencies.append(seconds)
            latencies.append(seconds)
    gates = _gate_rows(project_ids, start, now)

    approved = sum(w.approved for w in buckets)
    first_pass = sum(w.first_pass for w in buckets)
    gate_finished = sum(g["finished"] for g in gates)
    gate_failed = sum(g["failed"] for g in gates)
    p50, p90 = percentile(latencies, 50), percentile(latencies, 90)
    unit, divisor = _latency_unit([w.latency_p50 for w in buckets])
    span = f"{buckets[0].iso} to {buckets[-1].iso}"
    return {
        "weeks": buckets,
        "window_start": start,
        "window_end": now,
        "span": span,
        "approved": approved,
        "first_pass": first_pass,
        "first_pass_pct": 100 * first_pass / approved if approved else None,
        "first_pass_text": ratio_text(first_pass, approved),
        "gates": gates,
        "gate_finished": gate_finished,
        "gate_failed": gate_failed,
        "gate_failure_pct": 100 * gate_failed / gate_finished if gate_finished else None,
        "gate_failure_text": ratio_text(gate_failed, gate_finished),
        "reviews": len(latencies),
        "latency_p50": p50,
        "latency_p90": p90,
        "latency_text": (
            f"p50 {duration_text(p50)} · p90 {duration_text(p90)}" if latencies else NO_DATA
        ),
        "latency_unit": unit,
        "charts": {
            "throughput": bar_chart(
                [(w.label, w.approved) for w in buckets],
                title=f"Tasks approved per week, {span}",
                titles=[f"{w.iso} (from {w.start:%d %b})" for w in buckets],
            ),
            "first_pass_yield": bar_chart(
                [(w.label, w.first_pass_pct) for w in buckets],
                unit="%",
                max_value=100,
                title=f"First-pass yield per week, {span}",
                titles=[f"{w.iso} (from {w.start:%d %b})" for w in buckets],
                value_labels=[
                    ratio_text(w.first_pass, w.approved) if w.approved else "no approvals"
                    for w in buckets
                ],
            ),
            "gate_failure": hbar_chart(
                [(g["gate"], g["failure_pct"]) for g in gates],
                unit="%",
                max_value=100,
                bad=True,
                title=f"Gate failure rate by gate, {span}",
                value_labels=[g["text"] for g in gates],
            ),
            "review_latency": bar_chart(
                [
                    (w.label, None if w.latency_p50 is None else w.latency_p50 / divisor)
                    for w in buckets
                ],
                unit=unit,
                title=f"Review latency p50 per week in {unit}, {span}",
                titles=[f"{w.iso} (from {w.start:%d %b})" for w in buckets],
                value_labels=[
                    f"{duration_text(w.latency_p50)} over {_plural(len(w.latencies), 'review')}"
                    if w.latencies
                    else "no reviews"
                    for w in buckets
                ],
            ),
        },
    }


def window_start(weeks: int, now: datetime) -> datetime:
    """Monday 00:00 (the site's time zone) of the oldest of the last ``weeks`` ISO weeks."""
    first_day = _monday(timezone.localtime(now).date()) - timedelta(weeks=max(1, weeks) - 1)
    return timezone.make_aware(datetime.combine(first_day, time.min))


def _review_rows(project_ids, start, end) -> list[tuple[str, datetime, datetime | None, bool]]:
    """(transition, reviewed at, entered review at, reworked) for each task verdict in the window.

    ``reworked`` is only meaningful for approvals: the approved attempt is the task's
    ``current_attempt`` (done is final), and an earlier attempt of the task ended
    failed or rejected.
    """
    task_type = ContentType.objects.get_for_model(Task)
    entered_review = (
        Event.objects.filter(
            task_id=OuterRef("task_id"),
            content_type=task_type,
            transition="gates_passed",
            created_at__lte=OuterRef("created_at"),
        )
        .order_by("-created_at", "-id")
        .values("created_at")[:1]
    )
    reworked = Attempt.objects.filter(
        task_id=OuterRef("task_id"),
        state__in=REWORK_ATTEMPT_STATES,
        number__lt=OuterRef("task__current_attempt__number"),
    )
    return list(
        Event.objects.filter(
            project_id__in=project_ids,
            content_type=task_type,
            transition__in=REVIEW_TRANSITIONS,
            created_at__gte=start,
            created_at__lte=end,
        )
        .order_by()
        .annotate(ready_at=Subquery(entered_review), reworked=Exists(reworked))
        .values_list("transition", "created_at", "ready_at", "reworked")
    )


def _gate_rows(project_ids, start, end) -> list[dict]:
    """Per gate name: runs finished in the window, how many failed (or erred), the rate."""
    rows = (
        GateRun.objects.filter(
            attempt__task__project_id__in=project_ids,
            state__in=FINISHED_GATE_STATES,
            finished_at__gte=start,
            finished_at__lte=end,
        )
        .order_by()
        .values("gate")
        .annotate(finished=Count("pk"), failed=Count("pk", filter=Q(state__in=FAILED_GATE_STATES)))
    )
    gates = [
        {
            "gate": row["gate"],
            "finished": row["finished"],
            "failed": row["failed"],
            "failure_pct": 100 * row["failed"] / row["finished"],
            "text": ratio_text(row["failed"], row["finished"]),
        }
        for row in rows
    ]
    # Worst first, so the gate that blocks most work is at the top of the chart.
    gates.sort(key=lambda g: (-g["failure_pct"], -g["finished"], g["gate"]))
    return gates


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _latency_unit(values: Sequence[float | None]) -> tuple[str, int]:
    """Hours, unless every weekly p50 is under an hour: then minutes."""
    known = [v for v in values if v is not None]
    if known and max(known) < 3600:
        return "min", 60
    return "h", 3600


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def percentile(values: Sequence[float], p: int) -> float | None:
    """Nearest-rank percentile: the smallest value that at least ``p`` % of values do not exceed."""
    if not values:
        return None
    ordered = sorted(values)
    rank = -(-p * len(ordered) // 100)  # ceil(p/100 * n) in integers, no float rounding
    return ordered[max(rank, 1) - 1]


def percent_text(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a whole percentage, rounded half up: 2 of 3 is "67%"."""
    return f"{(200 * part + whole) // (2 * whole)}%"


def ratio_text(part: int, whole: int) -> str:
    """ "67% (2 of 3)", or "no data yet" when there is nothing to divide."""
    if not whole:
        return NO_DATA
    return f"{percent_text(part, whole)} ({part} of {whole})"


def duration_text(seconds: float | None) -> str:
    """A duration in the largest unit that keeps it readable: "40 s", "12 min", "3.5 h", "2.1 d"."""
    if seconds is None:
        return NO_DATA
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# --- SVG charts ----------------------------------------------------------------------------


def _num(x: float) -> str:
    """A coordinate, short: 12, 12.5."""
    return f"{x:.1f}".removesuffix(".0")


def value_text(value: float | None, unit: str = "") -> str:
    """A chart value with its unit: "3", "2.5 h", "67%"; "no data" for None."""
    if value is None:
        return "no data"
    number = f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"
    if unit == "%":
        return f"{number}%"
    return f"{number} {unit}".rstrip()


def _svg(width: int, height: int, label: str, body: list[str]) -> SafeString:
    # Safe: every text and attribute value in ``body`` and ``label`` is escaped or a number.
    return mark_safe(
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(label)}">' + "".join(body) + "</svg>"
    )


def _empty(width: int, height: int, title: str, empty: str, baseline: float) -> SafeString:
    return _svg(
        width,
        height,
        f"{title}: {empty}",
        [
            f'<line class="axis" x1="8" y1="{_num(baseline)}" x2="{width - 8}" y2="{_num(baseline)}"/>',
            f'<text class="label empty" x="{width / 2:.0f}" y="{height / 2:.0f}" '
            f'text-anchor="middle">{escape(empty)}</text>',
        ],
    )


def bar_chart(
    points: list[tuple[str, float | None]],
    *,
    unit: str = "",
    title: str = "",
    max_value: float | None = None,
    titles: list[str] | None = None,
    value_labels: list[str] | None = None,
    bad: bool = False,
    empty: str = NO_DATA,
    width: int = 600,
    height: int = 220,
) -> SafeString:
    """A vertical bar chart as inline SVG, one bar per ``(label, value)``, left to right.

    ``value`` None means no data for that point (no bar, "no data" on hover), which is
    not the same as 0. The scale runs to ``max_value`` (e.g. 100 for percentages) or to
    the largest value, at least 1. With no values, or nothing above 0 on a free scale,
    the chart is an empty axis saying ``empty``. Above each bar is its value with
    ``unit``; ``titles`` (hover text per bar, default the label) and ``value_labels``
    (the value in words for hover and the summary, e.g. "50% (1 of 2)"; default the
    value with ``unit``) are optional. All text is escaped; the SVG carries
    ``role="img"`` and an ``aria-label`` listing every value, and uses classes only
    (no ``style``), so it passes the CSP.
    """
    top, bottom, side = 18, 26, 8
    baseline = height - bottom
    values = [v for _, v in points if v is not None]
    if not values or (max_value is None and max(values) <= 0):
        return _empty(width, height, title, empty, baseline)
    # A free scale reaches at least 1 unit, so a week of 0.01 h is not drawn full height.
    scale = max_value if max_value is not None else max(*values, 1)
    texts = value_labels or [value_text(v, unit) for _, v in points]
    hovers = titles or [label for label, _ in points]
    slot = (width - 2 * side) / len(points)
    bar_width = max(slot * 0.64, 1)
    every = -(-len(points) // 16)  # thin out axis labels beyond 16 bars
    body = []
    summary = []
    for i, ((label, value), text, hover) in enumerate(zip(points, texts, hovers, strict=True)):
        summary.append(f"{label} {text}")
        centre = side + slot * (i + 0.5)
        if i % every == 0:
            body.append(
                f'<text class="label" x="{_num(centre)}" y="{height - 8}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
        if value is None:
            body.append(
                f'<rect class="bar none" x="{_num(centre - bar_width / 2)}" y="{top}" '
                f'width="{_num(bar_width)}" height="{baseline - top}" fill-opacity="0">'
                f"<title>{escape(hover)}: {escape(text)}</title></rect>"
            )
            continue
        bar_height = (baseline - top) * min(max(value, 0) / scale, 1)
        y = baseline - bar_height
        css = "bar bad" if bad else "bar"
        body.append(
            f'<rect class="{css}" x="{_num(centre - bar_width / 2)}" y="{_num(y)}" '
            f'width="{_num(bar_width)}" height="{_num(bar_height)}">'
            f"<title>{escape(hover)}: {escape(text)}</title></rect>"
        )
        body.append(
            f'<text class="value" x="{_num(centre)}" y="{_num(y - 4)}" '
            f'text-anchor="middle">{escape(value_text(value, unit))}</text>'
        )
    body.append(
        f'<line class="axis" x1="{side}" y1="{baseline}" x2="{width - side}" y2="{baseline}"/>'
    )
    return _svg(width, height, f"{title}: " + "; ".join(summary), body)


def hbar_chart(
    points: list[tuple[str, float | None]],
    *,
    unit: str = "",
    title: str = "",
    max_value: float | None = None,
    value_labels: list[str] | None = None,
    bad: bool = False,
    empty: str = NO_DATA,
    width: int = 600,
    row_height: int = 26,
    label_width: int = 170,
) -> SafeString:
    """A horizontal bar chart as inline SVG, one row per ``(label, value)``, top to bottom.

    Long labels are cut to fit on the axis and shown whole on hover. ``value_labels``
    (text after each bar, default the value with ``unit``) lets the caller add counts,
    e.g. "25% (1 of 4)". Scale, escaping, accessibility and the empty chart behave
    as in ``bar_chart``.
    """
    top, bottom, value_room = 8, 8, 120
    height = top + bottom + row_height * max(len(points), 3)
    values = [v for _, v in points if v is not None]
    if not values or (max_value is None and max(values) <= 0):
        return _empty(width, height, title, empty, height - bottom)
    scale = max_value if max_value is not None else max(*values, 1)
    texts = value_labels or [value_text(v, unit) for _, v in points]
    x0 = label_width
    room = width - x0 - value_room
    body = []
    summary = []
    for i, ((label, value), text) in enumerate(zip(points, texts, strict=True)):
        summary.append(f"{label} {text}")
        y = top + row_height * i
        middle = y + row_height / 2
        shown = label if len(label) <= 24 else label[:23] + "…"
        body.append(
            f'<text class="label" x="{x0 - 6}" y="{_num(middle + 4)}" text-anchor="end">'
            f"<title>{escape(label)}</title>{escape(shown)}</text>"
        )
        bar_width = 0.0 if value is None else room * min(max(value, 0) / scale, 1)
        css = "bar bad" if bad else "bar"
        body.append(
            f'<rect class="{css}" x="{x0}" y="{_num(y + 4)}" width="{_num(bar_width)}" '
            f'height="{row_height - 8}"><title>{escape(label)}: {escape(text)}</title></rect>'
        )
        body.append(
            f'<text class="value" x="{_num(x0 + bar_width + 6)}" y="{_num(middle + 4)}">'
            f"{escape(text)}</text>"
        )
    body.append(f'<line class="axis" x1="{x0}" y1="{top}" x2="{x0}" y2="{height - bottom}"/>')
    return _svg(width, height, f"{title}: " + "; ".join(summary), body)
