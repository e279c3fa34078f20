"""What the work costs and what works: the agents' self-reported usage, summed.

Reads only. Every figure comes from ``Attempt.usage`` (``{model, input_tokens,
output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, priced_cost_usd,
wall_seconds, by_model}``, ``tasks.usage``), which each attempt's agent reports on heartbeat
and submit: nothing here is measured by the site, so every page and answer that shows
these figures labels them *self-reported*. A cost is what the agents reported
(``reported_cost_usd``) plus what the project's price table priced for tokens reported
without one (``priced_cost_usd``); every row gives both parts. A key that is missing, or whose value is not
a plain non-negative number (``"0.35"``, ``12``), counts as 0; a missing model is
``unknown model``. Amounts are summed in the database as decimals with six places
(``Cast(KeyTextTransform(...), DecimalField)``, valid on PostgreSQL and SQLite) and
answered as ``Decimal`` with exactly six places.

The scope is the attempts of ``project_ids`` started from ``start`` up to ``end`` (the
dashboard's window). The cost is five queries whatever the size of the history: the
totals, and one grouped aggregate each per agent, per spec and per task; the per-model
rows read the scope's ``by_model`` breakdowns once and add them up here (one attempt may
use several models).
"""

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    Exists,
    OuterRef,
    Q,
    TextField,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce

from evidence.models import GateRun, GateRunState
from oversight.dashboard import ratio_text
from tasks.models import Attempt, AttemptState
from tasks.usage import DECIMAL_TEXT, WHOLE_TEXT, usage_sum

SELF_REPORTED = "self-reported"
UNKNOWN_MODEL = "unknown model"
NO_SPEC = "no spec"
TASKS_SHOWN = 100  # the most expensive tasks, for the page and the API
PLACES = Decimal("0.000001")
# Missing and empty are one group: the unknown model.
MODEL = Coalesce(KeyTextTransform("model", "usage"), Value(""), output_field=TextField())


def _sums() -> dict:
    """The usage sums every group answers, as aggregate expressions."""
    tokens = BigIntegerField()
    return {
        "attempts": Count("pk"),
        "cost": usage_sum("cost_usd") + usage_sum("priced_cost_usd"),
        "reported_cost": usage_sum("cost_usd"),
        "priced_cost": usage_sum("priced_cost_usd"),
        "input_tokens": usage_sum("input_tokens", WHOLE_TEXT, tokens),
        "output_tokens": usage_sum("output_tokens", WHOLE_TEXT, tokens),
        "wall_seconds": usage_sum("wall_seconds"),
    }


# A reviewer's own verdict: approved or rejected, not an approval carried over to a clean
# rebase (``tasks.landing.attempt_requeue`` marks those ``landing.rebase_of``).
REVIEWED = Q(state__in=(AttemptState.APPROVED, AttemptState.REJECTED)) & ~Q(
    landing__has_key="rebase_of"
)
FIRST_PASS = REVIEWED & Q(state=AttemptState.APPROVED, gates_retried=False)


def _verdicts() -> dict:
    return {
        "reviewed": Count("pk", filter=REVIEWED),
        "first_pass": Count("pk", filter=FIRST_PASS),
    }


def _scope(project_ids, start, end):
    # A gate run counts against first pass if it was started more than once (a crash or a
    # lost worker re-ran it) or did not pass.
    retried = GateRun.objects.filter(attempt=OuterRef("pk")).filter(
        Q(tries__gt=1) | ~Q(state=GateRunState.PASSED)
    )
    return (
        Attempt.objects.filter(
            task__project_id__in=project_ids, started_at__gte=start, started_at__lte=end
        )
        .alias(gates_retried=Exists(retried))
        .order_by()
    )


def amount(value) -> Decimal:
    """A summed amount with exactly six places, whatever the database answered."""
    return Decimal(value or 0).quantize(PLACES, rounding=ROUND_HALF_UP)


def _per(total: Decimal, count: int) -> Decimal | None:
    return amount(total / count) if count else None


@dataclass
class Group:
    """One row of a breakdown: its name and what its attempts reported."""

    name: str
    attempts: int
    cost_usd: Decimal
    input_tokens: int
    output_tokens: int
    wall_seconds: Decimal
    reported_cost_usd: Decimal = Decimal(0)
    priced_cost_usd: Decimal = Decimal(0)

    @classmethod
    def from_row(cls, name: str, row: dict, **more):
        return cls(
            name=name,
            attempts=row["attempts"],
            cost_usd=amount(row["cost"]),
            input_tokens=int(row["input_tokens"] or 0),
            output_tokens=int(row["output_tokens"] or 0),
            wall_seconds=amount(row["wall_seconds"]),
            reported_cost_usd=amount(row.get("reported_cost")),
            priced_cost_usd=amount(row.get("priced_cost")),
            **more,
        )

    @property
    def cost_source(self) -> str:
        """Where the cost came from: "reported", "priced", "reported + priced" or "none"."""
        parts = [
            name
            for name, value in (
                ("reported", self.reported_cost_usd),
                ("priced", self.priced_cost_usd),
            )
            if value
        ]
        return " + ".join(parts) or "none"


@dataclass
class Worker(Group):
    """An agent's or a model's row, with its first-pass rate (``cost_figures``)."""

    reviewed: int = 0
    first_pass: int = 0

    @property
    def first_pass_rate(self) -> float | None:
        return self.first_pass / self.reviewed if self.reviewed else None

    @property
    def first_pass_text(self) -> str:
        """ "50% (1 of 2)", or "no data yet" when none was reviewed."""
        return ratio_text(self.first_pass, self.reviewed)


@dataclass
class SpecRow(Group):
    key: str | None = None
    tasks: int = 0


@dataclass
class TaskRow(Group):
    key: str = ""
    state: str = ""
    spec: str | None = None


def _by_cost(row: Group):
    return (-row.cost_usd, row.name)


def _number(value, whole=False):
    """A stored figure that is a plain non-negative number, else 0 (as ``tasks.usage.usage_sum``)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return 0 if whole else Decimal(0)
    text = repr(value) if isinstance(value, float) else str(value)
    if whole:
        return int(text) if re.fullmatch(WHOLE_TEXT, text) else 0
    return Decimal(text) if re.fullmatch(DECIMAL_TEXT, text) else Decimal(0)


def _per_model(scope) -> list[Worker]:
    """One row per model of the scope's ``by_model`` breakdowns (an attempt without one
    counts under its ``model``): its attempts, tokens and cost (reported where its agent
    reported one, else priced), the wall time of the attempts it was last in, and the
    first-pass rate of its attempts. One query."""
    rows = scope.annotate(
        is_reviewed=Case(When(REVIEWED, then=Value(1)), default=Value(0)),
        is_first=Case(When(FIRST_PASS, then=Value(1)), default=Value(0)),
    ).values_list("usage", "is_reviewed", "is_first")
    found: dict[str, dict] = {}
    for usage, reviewed, first in rows:
        usage = usage if isinstance(usage, dict) else {}
        parts = usage.get("by_model")
        if not isinstance(parts, dict) or not parts:
            parts = {
                usage.get("model") or "": {
                    "input_tokens": usage.get("input_tokens"),
                    "output_tokens": usage.get("output_tokens"),
                    "cost_usd": usage.get("cost_usd"),
                }
            }
        last = usage.get("model") or ""
        for name, part in parts.items():
            part = part if isinstance(part, dict) else {}
            row = found.setdefault(
                name,
                {
                    "attempts": 0,
                    "reported_cost": Decimal(0),
                    "priced_cost": Decimal(0),
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "wall_seconds": Decimal(0),
                    "reviewed": 0,
                    "first_pass": 0,
                },
            )
            row["attempts"] += 1
            row["reviewed"] += reviewed
            row["first_pass"] += first
            row["input_tokens"] += _number(part.get("input_tokens"), whole=True)
            row["output_tokens"] += _number(part.get("output_tokens"), whole=True)
            if part.get("cost_usd") is not None:
                row["reported_cost"] += _number(part.get("cost_usd"))
            else:
                row["priced_cost"] += _number(part.get("priced_cost_usd"))
            if name == last or len(parts) == 1:
                row["wall_seconds"] += _number(usage.get("wall_seconds"))
    return [
        Worker.from_row(
            name or UNKNOWN_MODEL,
            {**row, "cost": row["reported_cost"] + row["priced_cost"]},
            reviewed=row["reviewed"],
            first_pass=row["first_pass"],
        )
        for name, row in found.items()
    ]


def cost_figures(*, project_ids: list[int], start: datetime, end: datetime) -> dict:
    """What the attempts of ``project_ids`` started in ``[start, end]`` reported using.

    - ``total``: every attempt of the scope (``Group``, named "all"); ``reported`` counts
      the attempts that reported a cost at all.
    - ``approved_tasks``: tasks with an attempt in the scope that was approved (by a
      reviewer, or carried over to a clean rebase); ``landed_tasks``: those of the scope's
      tasks whose change is on the landing target (``Task.landed_commit``).
    - ``cost_per_approved_task`` / ``cost_per_landed_task``: the whole scope's cost
      divided by that count (so the attempts that failed or were rejected on the way are
      part of what an approved task cost), None when the count is 0.
    - ``agents`` and ``models``: per agent (username) and per reported model, most
      expensive first, each with its **first-pass rate**: of its attempts that reached a
      reviewer's verdict (approved or rejected; not one still in review, and not an
      approval carried over to a clean rebase), the share that were approved with every
      gate run passed at its first try (``GateRun.tries`` at most 1). An attempt failed by
      its gates never reached review and counts in neither part.
    - ``specs``: per spec of the tasks (``key`` None for tasks without one), with how many
      tasks; ``tasks``: the ``TASKS_SHOWN`` most expensive tasks, ``tasks_total`` of all.
    """
    scope = _scope(project_ids, start, end)
    totals = scope.aggregate(
        **_sums(),
        reported=Count("pk", filter=Q(usage__has_key="cost_usd")),
        tasks=Count("task", distinct=True),
        approved_tasks=Count("task", distinct=True, filter=Q(state=AttemptState.APPROVED)),
        landed_tasks=Count("task", distinct=True, filter=~Q(task__landed_commit="")),
    )
    total = Group.from_row("all", totals)
    agents = [
        Worker.from_row(
            row["agent__username"], row, reviewed=row["reviewed"], first_pass=row["first_pass"]
        )
        for row in scope.values("agent__username").annotate(**_sums(), **_verdicts())
    ]
    models = _per_model(scope)
    specs = [
        SpecRow.from_row(
            row["task__spec__title"] or NO_SPEC,
            row,
            key=row["task__spec__key"],
            tasks=row["tasks"],
        )
        for row in scope.values("task__spec__key", "task__spec__title").annotate(
            **_sums(), tasks=Count("task", distinct=True)
        )
    ]
    tasks = [
        TaskRow.from_row(
            row["task__title"],
            row,
            key=row["task__key"],
            state=row["task__state"],
            spec=row["task__spec__key"],
        )
        for row in scope.values("task__key", "task__title", "task__state", "task__spec__key")
        .annotate(**_sums())
        .order_by("-cost", "task__key")[:TASKS_SHOWN]
    ]
    return {
        "self_reported": True,
        "window_start": start,
        "window_end": end,
        "total": total,
        "reported": totals["reported"],
        "tasks_total": totals["tasks"],
        "approved_tasks": totals["approved_tasks"],
        "landed_tasks": totals["landed_tasks"],
        "cost_per_approved_task": _per(total.cost_usd, totals["approved_tasks"]),
        "cost_per_landed_task": _per(total.cost_usd, totals["landed_tasks"]),
        "agents": sorted(agents, key=_by_cost),
        "models": sorted(models, key=_by_cost),
        "specs": sorted(specs, key=lambda row: (-row.cost_usd, row.key or "")),
        "tasks": tasks,
    }
