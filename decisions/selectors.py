"""Reads for decisions: search, the supersession chain, what changed between spec versions."""

import re

from django.db import connection
from django.db.models import BooleanField, F, Q, QuerySet
from django.db.models.expressions import RawSQL

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
    version's order, then the removed ones in the old version's order. Reads
    ``criteria.all()``, so a prefetch serves it.
    """
    before = {c.key: c for c in old.criteria.all()}
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
