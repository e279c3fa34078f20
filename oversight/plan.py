"""The plan of a project: what is left, what waits on what, the longest chain, and when
the open work may be done.

Pure functions over plain data (``PlanTask``, dependency links, ``Completion``) build the
plan; ``plan_for`` loads what they need in a constant number of queries, whatever the
project's size. The API (``oversight.api``) answers the dict ``build_plan`` returns and
the page (``oversight.plan_svg``) draws it. docs/api.md, "The plan", says what each field means.
"""

import hashlib
import random
import statistics
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from math import log

from django.core.cache import cache
from django.db.models import OuterRef, Q, Subquery
from django.urls import reverse
from django.utils import timezone

from decisions.models import Spec
from oversight.dashboard import percentile
from projects.errors import NotFound
from projects.models import Event
from tasks.models import Attempt, Label, Task, TaskState

# A task in one of these states is finished: it neither waits nor is waited on.
FINISHED = frozenset({TaskState.DONE, TaskState.CANCELLED})
# What an unfinished task weighs when the project has finished nothing with a first
# attempt yet: half a working day.
DEFAULT_HOURS = 4.0
# The weights rest on the project's latest completions, at most this many.
HISTORY_LIMIT = 500
# The forecast draws days from this many past days (today included).
WINDOW_DAYS = 30
TRIALS = 1000
# A trial that has not finished after this many days counts as "later than that".
HORIZON_DAYS = 3 * 365
FORECAST_PERCENTILES = (50, 85)
# Seeds are 32 bits, as the default one (a CRC-32) is.
SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class PlanTask:
    """A task as the plan sees it."""

    key: str
    title: str
    state: str
    labels: tuple[str, ...] = ()
    spec: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


@dataclass(frozen=True)
class Completion:
    """A task of the project that reached done: its labels, when its first attempt
    started (None if it had none) and when it was done."""

    labels: tuple[str, ...]
    started_at: datetime | None
    done_at: datetime


@lru_cache(maxsize=65536)
def key_order(key: str) -> tuple[str, int]:
    """Keys in their natural order: FM-2 before FM-10."""
    prefix, _, number = key.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (key, -1)


def _keys(keys: Iterable[str]) -> list[str]:
    return sorted(set(keys), key=key_order)


# --- Weights ----------------------------------------------------------------------------------


class Weights:
    """How long an unfinished task is expected to take, from how long finished tasks took
    here: the median seconds from a task's first attempt starting to its reaching done.

    A task weighs the largest median among its labels that have history (a task is as slow
    as its slowest kind; ties go to the label first by name), else the project's median,
    else ``default_hours``. Medians are whole seconds, so equal chains tie exactly.
    """

    def __init__(self, completions: Iterable[Completion], default_hours: float = DEFAULT_HOURS):
        by_label = defaultdict(list)
        every = []
        for c in completions:
            if c.started_at is None or c.done_at < c.started_at:
                continue
            seconds = (c.done_at - c.started_at).total_seconds()
            every.append(seconds)
            for label in set(c.labels):
                by_label[label].append(seconds)
        self.by_label = {
            label: (round(statistics.median(values)), len(values))
            for label, values in by_label.items()
        }
        self.project = (round(statistics.median(every)), len(every)) if every else None
        self.default_seconds = round(default_hours * 3600)
        self.completions = len(every)

    def of(self, labels: Iterable[str]) -> tuple[int, str]:
        """``(seconds, basis)`` for a task carrying ``labels``."""
        known = sorted(
            ((self.by_label[label], label) for label in set(labels) if label in self.by_label),
            key=lambda item: (-item[0][0], item[1]),
        )
        if known:
            (seconds, n), label = known[0]
            return seconds, f"label {label}: median of {n}"
        if self.project:
            seconds, n = self.project
            return seconds, f"project: median of {n}"
        return self.default_seconds, "default: no history"

    @property
    def basis(self) -> str:
        if not self.completions:
            return (
                f"no task here has gone from its first attempt to done yet: each open task"
                f" weighs the default {_hours(self.default_seconds)} h"
            )
        return (
            f"median hours from first attempt to done, by label, else the project's median,"
            f" over the last {self.completions} completions"
        )


def _hours(seconds: int) -> float:
    return round(seconds / 3600, 2)


# --- The graph --------------------------------------------------------------------------------


def build_plan(
    tasks: Iterable[PlanTask],
    links: Iterable[tuple[str, str, str]],
    weights: Weights,
    *,
    spec: str | None = None,
    url_for: Callable[[str], str] = lambda key: f"/tasks/{key}/",
) -> dict:
    """The plan's graph: ``{nodes, edges, cycles, critical_path}``.

    ``tasks`` are every unfinished task and, with ``spec``, that spec's finished ones;
    ``links`` are ``(dependent, dependency, dependency's state)`` for the dependencies of
    those tasks. Without ``spec`` the nodes are every unfinished task; with it, the spec's
    tasks (done ones too, so progress shows) and the unfinished tasks they wait on,
    however far up. An edge ``{from, to}`` means ``to`` depends on ``from``.
    ``blocked_by`` lists every dependency of an unfinished task that is not done (one
    outside the nodes too: a cancelled dependency never lets it be claimed). ``cycles``
    are the groups of unfinished tasks that wait on each other (each strongly connected
    component, keys in order): they cannot be claimed. The critical path is the chain of
    unfinished tasks with the most expected hours (a cycle counts as one step of all its
    members); among equal chains, the one whose keys come first in key order.
    """
    by_key = {t.key: t for t in tasks}
    depends_on = defaultdict(list)
    open_dependencies = defaultdict(list)
    for dependent, dependency, state in links:
        depends_on[dependent].append(dependency)
        if state != TaskState.DONE:
            open_dependencies[dependent].append(dependency)

    if spec is None:
        keys = {k for k, t in by_key.items() if not t.finished}
    else:
        keys = {k for k, t in by_key.items() if t.spec == spec}
        # The unfinished tasks the spec's unfinished tasks wait on, however far up.
        stack = [k for k in keys if not by_key[k].finished]
        while stack:
            for dependency in depends_on[stack.pop()]:
                task = by_key.get(dependency)
                if task is not None and not task.finished and dependency not in keys:
                    keys.add(dependency)
                    stack.append(dependency)

    edges = sorted(
        ((dependency, dependent) for dependent in keys for dependency in depends_on[dependent]),
        key=lambda e: (key_order(e[0]), key_order(e[1])),
    )
    edges = [e for e in edges if e[0] in keys]

    successors = {k: [] for k in keys if not by_key[k].finished}
    for a, b in edges:
        if a in successors and b in successors:
            successors[a].append(b)
    unfinished = list(successors)
    components = strongly_connected(successors)
    cycles = sorted(
        (c for c in components if len(c) > 1 or c[0] in successors[c[0]]),
        key=lambda c: key_order(c[0]),
    )
    in_cycle = {k for c in cycles for k in c}

    weight = {k: weights.of(by_key[k].labels) for k in unfinished}
    path = _critical_path(successors, components, {k: w for k, (w, _) in weight.items()})
    on_path = set(path)

    nodes = []
    for key in _keys(keys):
        task = by_key[key]
        seconds, basis = weight.get(key, (None, "finished"))
        nodes.append(
            {
                "key": key,
                "title": task.title,
                "state": task.state,
                "labels": sorted(task.labels),
                "spec": task.spec,
                "weight_hours": None if seconds is None else _hours(seconds),
                "weight_basis": basis,
                "blocked_by": [] if task.finished else _keys(open_dependencies[key]),
                "in_cycle": key in in_cycle,
                "on_critical_path": key in on_path,
                "url": url_for(key),
            }
        )
    return {
        "spec": spec,
        "nodes": nodes,
        "edges": [{"from": a, "to": b} for a, b in edges],
        "cycles": cycles,
        "critical_path": {
            "keys": path,
            "hours": _hours(sum(weight[k][0] for k in path)),
            "weights": weights.basis,
            "default_hours": _hours(weights.default_seconds),
        },
    }


def strongly_connected(successors: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of a graph (``{node: [successor, …]}``), each in
    key order, sinks first: a component comes after every component it leads to
    (Tarjan's algorithm, without recursion, so a chain of any length fits)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(successors, key=key_order):
        if root in index:
            continue
        work = [(root, iter(successors[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(_keys(component))
    return found


def _critical_path(successors: dict, components: list[list[str]], seconds: dict) -> list[str]:
    """The keys of the heaviest chain (each cycle condensed into one step of all its tasks);
    ``components`` sinks first, as ``strongly_connected`` gives them.

    Linear in the graph: each component keeps only its chain's weight, its own keys' order
    and the next component, never the chain itself (a chain of n tasks held whole at each
    step is n² in memory). Two chains from different components differ in their first
    component's keys, so comparing those decides a tie as comparing the whole chains would.
    """
    if not components:
        return []
    component_of = {k: n for n, c in enumerate(components) for k in c}
    # best[n]: (-seconds of the heaviest chain starting at component n, n's keys in order,
    # the component after n on it or None), so the smallest is the heaviest, and among
    # equals the first in key order. Sinks come first, so every successor's is known.
    best: list[tuple[int, tuple, int | None]] = []
    for n, members in enumerate(components):
        cost = sum(seconds[k] for k in members)
        after = {component_of[b] for k in members for b in successors[k]} - {n}
        tail = min(after, key=lambda m: best[m][:2], default=None)
        heaviest = cost - (best[tail][0] if tail is not None else 0)
        best.append((-heaviest, tuple(key_order(k) for k in members), tail))
    at = min(range(len(best)), key=lambda m: best[m][:2])
    chain = []
    while at is not None:
        chain += components[at]
        at = best[at][2]
    return chain


# --- The forecast -----------------------------------------------------------------------------


def daily_completions(done_at: Iterable[datetime], today: date) -> list[int]:
    """Tasks reaching done on each of the last ``WINDOW_DAYS`` days (UTC), oldest first,
    today included; days without any count 0."""
    first = today - timedelta(days=WINDOW_DAYS - 1)
    counts = [0] * WINDOW_DAYS
    for moment in done_at:
        day = moment.astimezone(UTC).date()
        if first <= day <= today:
            counts[(day - first).days] += 1
    return counts


def forecast(
    *,
    daily: list[int],
    open_count: int,
    today: date,
    seed: int,
    trials: int = TRIALS,
    horizon_days: int = HORIZON_DAYS,
) -> dict:
    """When the ``open_count`` unfinished tasks may all be done: a Monte Carlo over ``daily``.

    Each trial draws days (from tomorrow on) at random from the past days' completions,
    zero days included, until as many tasks are done as are open; p50 and p85 are the
    nearest-rank percentiles of the trials' days, as dates. ``random.Random(seed)`` draws,
    so a seed gives the same answer every time. Without completions in the window, or
    when even the mean pace could not finish half the work by the horizon (then fewer
    than half the trials could: Markov), the dates are null and ``reason`` says why.
    """
    completed = sum(daily)
    busy_days = sum(1 for n in daily if n)
    answer = {
        "p50": None,
        "p85": None,
        "p50_days": None,
        "p85_days": None,
        "open": open_count,
        "samples_days": len(daily),
        "completed_in_window": completed,
        "trials": 0,
        "seed": seed,
        "horizon_days": horizon_days,
        "basis": (
            f"{_plural(completed, 'task')} reached done in the last"
            f" {len(daily)} days (on {busy_days} of them)"
        ),
        "reason": None,
    }
    if open_count == 0:
        today_text = today.isoformat()
        return {
            **answer,
            **{"p50": today_text, "p85": today_text, "p50_days": 0, "p85_days": 0},
            "reason": "nothing is open",
        }
    if completed == 0:
        return {**answer, "reason": f"no completions in the last {len(daily)} days"}
    mean = completed / len(daily)
    if mean * horizon_days * 2 < open_count:
        return {
            **answer,
            "reason": f"at {_plural(completed, 'completion')} in {len(daily)} days, {open_count} open"
            f" tasks take longer than {horizon_days} days",
        }
    rng = random.Random(seed)
    busy = [n for n in daily if n]
    idle_share = 1 - len(busy) / len(daily)
    days = [_days_to_finish(rng, busy, idle_share, open_count, horizon_days) for _ in range(trials)]
    answer = {
        **answer,
        "trials": trials,
        "basis": answer["basis"] + f"; {trials} trials drawing each day from those {len(daily)}",
    }
    for p in FORECAST_PERCENTILES:
        n = percentile(days, p)
        if n is not None and n <= horizon_days:
            answer[f"p{p}_days"] = n
            answer[f"p{p}"] = (today + timedelta(days=n)).isoformat()
    if answer["p85"] is None:
        answer["reason"] = f"later than {horizon_days} days in more than 15% of trials"
    return answer


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _days_to_finish(rng, busy: list[int], idle_share: float, open_count: int, horizon: int) -> int:
    """One trial: days drawn until ``open_count`` tasks are done (past the horizon: one more).

    A drawn day is idle (no completions) with probability ``idle_share``, else one of the
    ``busy`` days. Rather than draw idle days one by one, the run of them before the next
    busy day is drawn at once, geometrically: the same in distribution, and a trial costs
    the busy days it needs, not every day.
    """
    log_idle = log(idle_share) if idle_share else None
    draw, done, day = rng.random, 0, 0
    while True:
        if log_idle is not None:
            day += int(log(1.0 - draw()) / log_idle)
        day += 1
        if day > horizon:
            return horizon + 1
        done += busy[int(draw() * len(busy))]
        if done >= open_count:
            return day


def default_seed(project) -> int:
    """The seed a project's page and API use unless asked for another: stable per project."""
    return zlib.crc32(project.slug.encode()) or 1


# --- Loading ----------------------------------------------------------------------------------


def spec_in(project, key: str | None):
    """The spec ``key`` of ``project`` (None for no key); a 404 ``NotFound`` naming it
    otherwise, another project's spec included."""
    if not key:
        return None
    spec = Spec.objects.filter(project=project, key=key).first()
    if spec is None:
        raise NotFound(f"no spec {key} in {project.slug}")
    return spec


def plan_for(project, *, spec=None, now: datetime | None = None, seed: int | None = None) -> dict:
    """The plan of ``project`` (narrowed to ``spec``, a Spec of it, when given) with its
    forecast, in five queries whatever the project's size."""
    now = now or timezone.now()
    unfinished = ~Q(state__in=FINISHED)
    loaded = Task.objects.filter(project=project).filter(
        unfinished | Q(spec=spec) if spec is not None else unfinished
    )
    rows = list(loaded.values_list("pk", "key", "title", "state", "spec__key"))
    links = list(
        Task.depends_on.through.objects.filter(from_task__in=loaded.values("pk")).values_list(
            "from_task__key", "to_task__key", "to_task__state"
        )
    )
    first_start = (
        Attempt.objects.filter(task_id=OuterRef("task_id"))
        .order_by("started_at", "pk")
        .values("started_at")[:1]
    )
    done = Event.objects.filter(project=project, task__isnull=False, to_state=TaskState.DONE)
    history = list(
        done.order_by("-created_at", "-id")
        .annotate(first_start=Subquery(first_start))
        .values_list("task_id", "first_start", "created_at")[:HISTORY_LIMIT]
    )
    today = now.astimezone(UTC).date()
    window_start = datetime.combine(
        today - timedelta(days=WINDOW_DAYS - 1), datetime.min.time(), tzinfo=UTC
    )
    recent = list(done.filter(created_at__gte=window_start).values_list("created_at", flat=True))
    labels = defaultdict(list)
    for task_id, name in Label.tasks.through.objects.filter(
        Q(task__in=loaded.values("pk")) | Q(task_id__in=[h[0] for h in history])
    ).values_list("task_id", "label__name"):
        labels[task_id].append(name)

    weights = Weights(
        Completion(tuple(labels[task_id]), started, done_at)
        for task_id, started, done_at in history
    )
    tasks = [
        PlanTask(key, title, state, tuple(labels[pk]), spec_key)
        for pk, key, title, state, spec_key in rows
    ]
    url = reverse("task-detail", args=["KEY-0"])
    plan = build_plan(
        tasks,
        links,
        weights,
        spec=spec.key if spec is not None else None,
        url_for=lambda key: url.replace("KEY-0", key),
    )
    open_count = sum(1 for node in plan["nodes"] if node["weight_hours"] is not None)
    inputs = {
        "daily": daily_completions(recent, today),
        "open_count": open_count,
        "today": today,
        "seed": seed if seed is not None else default_seed(project),
    }
    if seed is not None and seed != default_seed(project):
        # A seed of the caller's choosing is run, never kept: any member picks it, and a
        # loop over seeds would fill the cache that the rate limits are counted in.
        plan["forecast"] = forecast(**inputs)
        return {"project": project.slug, **plan}
    # The forecast is a pure function of its inputs: the same ones are answered from the
    # cache (a day at most, since today is one of them) instead of trials run again.
    key = "plan-forecast:" + hashlib.sha256(repr(sorted(inputs.items())).encode()).hexdigest()
    plan["forecast"] = cache.get(key)
    if plan["forecast"] is None:
        plan["forecast"] = forecast(**inputs)
        cache.set(key, plan["forecast"], 24 * 3600)
    return {"project": project.slug, **plan}
