"""Reads for decisions: search, and the supersession chain."""

from django.db import connection
from django.db.models import F, Q, QuerySet


def search_decisions(queryset: QuerySet, text: str) -> QuerySet:
    """Decisions matching ``text``, best match first.

    On PostgreSQL this is full-text search (``websearch`` syntax: words, "phrases",
    -exclusions) over title, decision, context and consequences, ranked with the title
    weighted highest. Elsewhere every word must appear in one of those fields.
    """
    text = text.strip()[:500]
    if not text:
        return queryset
    if connection.vendor == "postgresql":
        from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector

        vector = (
            SearchVector("title", weight="A", config="english")
            + SearchVector("decision", weight="B", config="english")
            + SearchVector("context", "consequences", weight="C", config="english")
        )
        query = SearchQuery(text, search_type="websearch", config="english")
        return (
            queryset.annotate(rank=SearchRank(vector, query))
            .filter(Q(rank__gt=0) | Q(key__iexact=text))
            .order_by(F("rank").desc(nulls_last=True), "-number")
        )
    for word in text.split()[:20]:
        queryset = queryset.filter(
            Q(title__icontains=word)
            | Q(context__icontains=word)
            | Q(decision__icontains=word)
            | Q(consequences__icontains=word)
            | Q(key__iexact=word)
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
