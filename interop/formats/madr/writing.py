"""Writing decisions as a MADR 4 folder (`write`), which `parse` reads back the same."""

from __future__ import annotations

import re

import yaml

from interop.documents import DecisionDoc
from interop.formats.madr.options import (
    chosen_option,
    is_pros_and_cons,
    keeps_pros_and_cons,
    pros_and_cons_section,
)
from interop.formats.madr.text import ALL_ALTERNATIVES, FM_KEY, own_number

RESERVED_EXTRA = {
    "front_matter",
    "sections",
    "preamble",
    "considered_options",
    "superseded_by",
    "supersedes",
    "date",
}


def write(decisions: list[DecisionDoc]) -> dict[str, bytes]:
    """A MADR 4 folder: `NNNN-slug.md` for each decision, keyed by file name.

    A decision without a number gets the next free one. Supersede links are written as MADR
    writes them, on the predecessor (`superseded by [ADR-0005](0005-slug.md)`); one whose
    predecessor is not superseded says `supersedes …` in its own status.
    """
    numbers = _numbers(decisions)
    names = {
        id(decision): f"{numbers[id(decision)][1]}-{_slug(decision.title)}.md"
        for decision in decisions
    }
    by_id = {decision.external_id: decision for decision in decisions}
    successors: dict[str, list[DecisionDoc]] = {}
    for decision in decisions:
        for predecessor in decision.supersedes:
            successors.setdefault(predecessor, []).append(decision)
    folder = {}
    for decision in decisions:
        status = _status_line(decision, successors, by_id, names, numbers)
        text = _render(decision, status, numbers[id(decision)][1])
        folder[names[id(decision)]] = text.encode("utf-8")
    return folder


def _numbers(decisions: list[DecisionDoc]) -> dict[int, tuple[int, str]]:
    """Each decision's number and its digits as the file name writes them."""
    used = {d.number for d in decisions if d.number is not None}
    next_free = max(used, default=0) + 1
    numbers = {}
    for decision in decisions:
        if decision.number is None:
            numbers[id(decision)] = (next_free, f"{next_free:04d}")
            next_free += 1
        elif (own := own_number(decision.external_id)).isdigit() and int(own) == decision.number:
            numbers[id(decision)] = (decision.number, own)
        else:
            numbers[id(decision)] = (decision.number, f"{decision.number:04d}")
    return numbers


def _slug(title: str) -> str:
    slug = re.sub(r"[\W_]+", "-", title.lower()).strip("-")
    return slug[:60].rstrip("-") or "decision"


def _status_line(
    decision: DecisionDoc,
    successors: dict[str, list[DecisionDoc]],
    by_id: dict[str, DecisionDoc],
    names: dict[int, str],
    numbers: dict[int, tuple[int, str]],
) -> str:
    """The decision's status as MADR writes it, supersede links included."""
    after = successors.get(decision.external_id, [])
    missing = decision.extra.get("superseded_by") or []
    if decision.state == "superseded":
        refs = [_ref(s, names, numbers) for s in after] + [f"ADR-{n}" for n in missing]
        status = f"superseded by {', '.join(refs)}" if refs else "deprecated"
    else:
        status = decision.state
    own = [
        _ref(by_id[p], names, numbers)
        for p in decision.supersedes
        if p in by_id and by_id[p].state != "superseded"
    ]
    own += [f"ADR-{p}" for p in decision.supersedes if p not in by_id]
    own += [f"ADR-{n}" for n in decision.extra.get("supersedes") or []]
    if own:
        status += f"; supersedes {', '.join(own)}"
    return status


def _ref(decision: DecisionDoc, names: dict[int, str], numbers: dict) -> str:
    return f"[ADR-{numbers[id(decision)][1]}]({names[id(decision)]})"


def _render(decision: DecisionDoc, status: str, digits: str) -> str:
    """The Markdown of one ADR: front matter, title, sections."""
    parts = [f"# {decision.title}"]
    preamble = decision.extra.get("preamble")
    if preamble:
        parts.append(preamble)
    if decision.context:
        parts.append(f"## Context and Problem Statement\n\n{decision.context}")
    options = _written_options(decision)
    if options:
        parts.append("## Considered Options\n\n" + "\n".join(f"* {o}" for o in options))
    outcome = decision.decision
    if decision.consequences:
        outcome = f"{outcome}\n\n### Consequences\n\n{decision.consequences}".strip("\n")
    if outcome:
        parts.append(f"## Decision Outcome\n\n{outcome}")
    sections = dict(decision.extra.get("sections") or {})
    if not keeps_pros_and_cons(decision, sections):
        sections = {h: t for h, t in sections.items() if not is_pros_and_cons(h)}
        parts.append(pros_and_cons_section(decision))
    for heading, text in sections.items():
        parts.append(f"## {heading}\n\n{text}".rstrip("\n"))
    body = "\n\n".join(part for part in parts if part)
    return f"{_front(decision, status, digits)}\n{body}\n"


def _written_options(decision: DecisionDoc) -> list[str]:
    chosen = chosen_option(decision.decision)
    alternatives = [a["option"] for a in decision.alternatives]
    if alternatives:
        return ([chosen] if chosen else []) + alternatives
    return list(decision.extra.get("considered_options") or [])


def _front(decision: DecisionDoc, status: str, digits: str) -> str:
    front: dict = {"status": status}
    if decision.date is not None:
        front["date"] = decision.date
    elif decision.extra.get("date"):
        front["date"] = decision.extra["date"]
    for key, names in (
        ("decision-makers", decision.deciders),
        ("consulted", decision.consulted),
        ("informed", decision.informed),
    ):
        if names:
            front[key] = list(names)
    front.update(decision.extra.get("front_matter") or {})
    own = {k: v for k, v in decision.extra.items() if k not in RESERVED_EXTRA}
    if decision.alternatives and not chosen_option(decision.decision):
        own[ALL_ALTERNATIVES] = True
    if own_number(decision.external_id) != digits:
        own["external-id"] = decision.external_id
    if own:
        front[FM_KEY] = own
    text = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return f"---\n{text}---"
