"""Reads for decisions: search."""

from django.db.models import Q, QuerySet


def search_decisions(queryset: QuerySet, text: str) -> QuerySet:
    """Decisions whose title, context, decision or consequences contain every word of ``text``."""
    for word in text.split()[:20]:
        queryset = queryset.filter(
            Q(title__icontains=word)
            | Q(context__icontains=word)
            | Q(decision__icontains=word)
            | Q(consequences__icontains=word)
            | Q(key__iexact=word)
        )
    return queryset
