"""Reads for decisions: search, the supersession chain, what changed between spec versions,
and what a decision changed (``decision_impact``)."""

import re

from django.db import connection
from django.db.models import BooleanField, Exists, F, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL

from decisions.models import Decision, SpecAmendment, SpecVersion
from projects.diffs import unified_diff

DECISION_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*-D\d+$")


def search_document(table: str = "") -> str:
    """The text searched, as SQL. Indexed on PostgreSQL by migration 0003 with
    ``table=""`` (decision_search_idx): the two must stay the same expression."""
    column = (lambda name: f'"{table}"."{name}"') if table else (lambda name: name)
    parts = " || ' ' || ".join(
        f"coalesce({column(name)}, '')" for name in ("title", "decision", "context", "consequences")
    )
    return f"to_tsvector('english'::regconfig, {parts})"


def search_decisions(queryset: QuerySet, text: str) -> QuerySet:
    """Decisions matching ``text``, best match first; a decision key finds that decision.

    On PostgreSQL this is full-text search (``websearch`` syntax: words, "phrases",
    -exclusions) over title, decision, context and consequences, through a GIN index;
    the matches are ranked with the title weighted highest. Elsewhere every word must
    appear in one of those fields.
    """
    text = text.strip()[:500]
    if not text:
        return queryset
    if DECISION_KEY.match(text):
        return queryset.filter(key__iexact=text)
    if connection.vendor == "postgresql":
        from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector

        document = search_document(queryset.model._meta.db_table)
        matches = RawSQL(
            f"{document} @@ websearch_to_tsquery('english'::regconfig, %s)",
            (text,),
            output_field=BooleanField(),
        )
        weighted = (
            SearchVector("title", weight="A", config="english")
            + SearchVector("decision", weight="B", config="english")
            + SearchVector("context", "consequences", weight="C", config="english")
        )
        query = SearchQuery(text, search_type="websearch", config="english")
        return (
            queryset.alias(matches=matches)
            .filter(matches=True)
            .annotate(rank=SearchRank(weighted, query))
            .order_by(F("rank").desc(nulls_last=True), "-number")
        )
    for word in text.split()[:20]:
        queryset = queryset.filter(
            Q(title__icontains=word)
            | Q(context__icontains=word)
            | Q(decision__icontains=word)
            | Q(consequences__icontains=word)
        )
    return queryset


def supersession_chain(decision) -> tuple[list, list]:
    """(earlier decisions it replaced, oldest first; later ones that replaced it, in order)."""
    earlier, seen = [], {decision.pk}
    frontier = list(decision.supersedes.all())
    while frontier:
        frontier = [d for d in frontier if d.pk not in seen]
        seen |= {d.pk for d in frontier}
        earlier = frontier + earlier
        frontier = [old for d in frontier for old in d.supersedes.all()]
    later, frontier = [], list(decision.superseded_by.all())
    while frontier:
        frontier = [d for d in frontier if d.pk not in seen]
        seen |= {d.pk for d in frontier}
        later += frontier
        frontier = [new for d in frontier for new in d.superseded_by.all()]
    return earlier, later


def criteria_changes(old, new) -> tuple[list[dict], list[str]]:
    """What changed in the acceptance criteria from version ``old`` to version ``new``.

    Criteria are matched by key; a criterion whose text or proof differs is ``changed``
    (its place in the list alone is no change). Answers ``(changes, unchanged keys)``:
    each change is ``{"change": "added"|"removed"|"changed", "key", "before", "after"}``
    with the two versions' ``Criterion`` (``None`` where it does not exist), in the new
    version's order, then the removed ones in the old version's order. ``old`` None is a
    first version: every criterion is added. Reads ``criteria.all()``, so a prefetch serves it.
    """
    before = {c.key: c for c in old.criteria.all()} if old is not None else {}
    after = {c.key: c for c in new.criteria.all()}
    changes, unchanged = [], []
    for key, now in after.items():
        was = before.get(key)
        if was is None:
            changes.append({"change": "added", "key": key, "before": None, "after": now})
        elif (was.text, was.proof) != (now.text, now.proof):
            changes.append({"change": "changed", "key": key, "before": was, "after": now})
        else:
            unchanged.append(key)
    changes += [
        {"change": "removed", "key": key, "before": was, "after": None}
        for key, was in before.items()
        if key not in after
    ]
    return changes, unchanged


def body_diff(old: str, new: str, old_label: str, new_label: str) -> list[tuple[str, str]]:
    """The lines of a spec body that differ from ``old`` to ``new``, each with its kind:
    ``hunk`` (the file and hunk headers), ``add``, ``del`` or ``ctx``."""
    lines = unified_diff(old.splitlines(), new.splitlines(), old_label, new_label, lineterm="")
    # The two file headers come first; told apart by place, since a removed line that
    # reads "-- x" also starts with "--- ".
    return [(_diff_kind(line, header=i < 2), line) for i, line in enumerate(lines)]


def _diff_kind(line: str, *, header: bool) -> str:
    if header or line.startswith("@@"):
        return "hunk"  # hunk and file headers, not changes
    return {"+": "add", "-": "del"}.get(line[:1], "ctx")


def _criterion(criterion) -> dict | None:
    return None if criterion is None else {"text": criterion.text, "proof": criterion.proof}


def _amended(decision: Decision) -> list[dict]:
    """Each spec version the decision created, with its diff against the version before."""
    # The versions it created and the ones its amendments were written against (the
    # accepted version each replaced; none for a spec's first), in one query.
    was_base = SpecAmendment.objects.filter(decision=decision, base_version=OuterRef("pk"))
    versions = list(
        SpecVersion.objects.filter(Q(source_decision=decision) | Q(Exists(was_base)))
        .annotate(was_base=Exists(was_base))
        .select_related("spec")
        .prefetch_related("criteria")
        .order_by("spec__number", "number")
    )
    created = [v for v in versions if v.source_decision_id == decision.pk]
    bases = {v.spec_id: v for v in versions if v.was_base}
    amended = []
    for version in created:
        base = bases.get(version.spec_id)
        changes, unchanged = criteria_changes(base, version)
        amended.append(
            {
                "spec": version.spec.key,
                "title": version.spec.title,
                "version": version.number,
                "state": version.state,
                "base_version": base.number if base else None,
                "body_diff": body_diff(
                    base.body if base else "",
                    version.body,
                    f"v{base.number}" if base else "(none)",
                    f"v{version.number}",
                ),
                "criteria_changes": [
                    {
                        "change": c["change"],
                        "key": c["key"],
                        "before": _criterion(c["before"]),
                        "after": _criterion(c["after"]),
                    }
                    for c in changes
                ],
                "criteria_unchanged": unchanged,
            }
        )
    return amended


# The attempt state of an approval (tasks.models.AttemptState.APPROVED): decisions sits below
# tasks and reads attempts only through the links that point up at them.
APPROVED = "approved"


def decision_impact(decision: Decision) -> dict:
    """What ``decision`` changed, as plain data for its page and its API.

    - ``amended``: each spec version its acceptance created (``SpecVersion.source_decision``),
      with the body's diff and the criteria's changes against the version its amendment
      was written against and replaced (none for a spec's first), as the spec page
      compares two versions;
    - ``tasks``: the tasks it binds, in number order: those it names (``via`` "task") and
      those on a spec it names (``via`` the spec's key). While it is accepted, each of them
      gets it in its context, and each review of them records it as in force;
    - ``approvals``: the approvals of those tasks judged while it was in force, read from
      each review's record (``Attempt.applied["decisions"]``, written by
      ``tasks.review.in_force``): ``{task, attempt, reviewer, judged_at, spec}``, oldest
      first; ``approvals_without``: their approvals judged when it was not in force
      (before it was accepted, or after it was superseded). An approval carried over to a
      clean rebase without a review of its own (``landing.rebase_of``) is its earlier
      attempt's, counted once there; a withdrawn approval is not an approval.

    Four queries, whatever the number of versions, tasks and approvals. Tasks and
    attempts are read through ``Decision.tasks`` and ``Task.attempts``, the relations that
    point up at them (docs/architecture.md), without importing their app.
    """
    named = Decision.tasks.through.objects.filter(decision_id=decision.pk)
    on_specs = Decision.specs.through.objects.filter(decision_id=decision.pk)
    task_model = Decision.tasks.field.related_model
    bound = task_model.objects.filter(
        Q(pk__in=named.values("task_id")) | Q(spec_id__in=on_specs.values("spec_id"))
    )
    tasks = list(
        bound.annotate(named=Exists(named.filter(task_id=OuterRef("pk"))))
        .select_related("spec")
        .only("number", "key", "title", "state", "spec", "spec__key")
        .order_by("number")
    )
    attempt_model = task_model.attempts.field.model
    approvals = (
        attempt_model.objects.filter(task__in=bound, state=APPROVED, applied__isnull=False)
        .exclude(landing__has_key="rebase_of")
        .select_related("task", "reviewed_by")
        # The state machines read their state when a row is loaded: it is never deferred.
        .only(
            "number",
            "state",
            "usage_state",
            "applied",
            "task",
            "task__key",
            "task__title",
            "task__state",
            "reviewed_by",
            "reviewed_by__username",
        )
        .order_by("ended_at", "pk")
    )
    in_force, without = [], []
    for attempt in approvals:
        applied = attempt.applied or {}
        spec = applied.get("spec")
        row = {
            "task": attempt.task.key,
            "title": attempt.task.title,
            "attempt": attempt.number,
            "reviewer": attempt.reviewed_by.get_username() if attempt.reviewed_by_id else None,
            "judged_at": applied.get("at"),
            "spec": f"{spec['key']} v{spec['version']}" if spec else None,
        }
        keys = {d.get("key") for d in applied.get("decisions", []) if isinstance(d, dict)}
        (in_force if decision.key in keys else without).append(row)
    return {
        "decision": decision.key,
        "state": decision.state,
        "amended": _amended(decision),
        "tasks": [
            {
                "task": t.key,
                "title": t.title,
                "state": t.state,
                "via": "task" if t.named else t.spec.key,
            }
            for t in tasks
        ],
        "approvals": in_force,
        "approvals_without": without,
    }
