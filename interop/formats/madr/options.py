"""The considered options of an ADR, the chosen one, and their pros and cons: read into a
decision's alternatives, and written back so that reading gives the same ones."""

from __future__ import annotations

import re

from interop.documents import DecisionDoc, Notice, Parsed
from interop.formats.madr.text import ALL_ALTERNATIVES, COMMENT, LINK, as_key, find_section, plain
from interop.formats.markdown import (
    LIST_MARKER,
    Document,
    indentation,
    item_continuation,
    read,
    short_title,
)

CHOSEN = re.compile(r"chosen\s+options?\b\s*:?(?P<rest>.*)$", re.IGNORECASE)
CHOSEN_NUMBERS = re.compile(
    r"^(?:options?\s*)?#?\d+(?:\s*(?:&|,|\+|and)\s*(?:options?\s*)?#?\d+)*\b(?![.,]\d)", re.I
)
QUOTED = re.compile(r"\s*(?:\"([^\"]+)\"|“([^”]+)”|`([^`]+)`)")
QUOTES = {'"': '"', "“": "”", "„": "“", "'": "'", "«": "»", "\u2018": "\u2019"}
AGAINST = re.compile(r"^(?:bad|cons?)\b\s*[,:]?\s*(?:because\s+)?(?P<text>.*)$", re.IGNORECASE)
OPTIONS_HEADINGS = {"considered options", "options considered", "options"}
PROS_CONS_HEADINGS = {"pros and cons of the options", "pros and cons of the options considered"}


def read_alternatives(doc: Document, decision: DecisionDoc, parsed: Parsed) -> None:
    """The considered options that were not chosen, each with its case against."""
    listed_all = bool(decision.extra.pop(ALL_ALTERNATIVES, False))
    reasons = _pros_and_cons(doc)
    options = _options(doc) or list(reasons)
    if not options:
        return
    chosen: list[str | None] = []
    if not listed_all:
        names = _chosen_names(decision.decision) or []
        chosen = [_match(name, options) for name in names]
        missing = next(
            (name for name, option in zip(names, chosen, strict=True) if option is None), None
        )
        if not names or missing:
            decision.extra["considered_options"] = options
            why = f"chosen option {missing!r} is none of" if missing else "no `Chosen option:` in"
            parsed.notices.append(
                Notice(decision.source, f"{why} the considered options: alternatives not imported")
            )
            return
    decision.alternatives = [
        {"option": option, "reason": _reason(option, reasons)}
        for option in options
        if option not in chosen
    ]


def drop_derivable_pros_and_cons(decision: DecisionDoc) -> None:
    """Forget the Pros and Cons section when `write` would give it back from the alternatives."""
    sections = decision.extra.get("sections", {})
    heading = next((h for h in sections if is_pros_and_cons(h)), None)
    if heading and pros_and_cons_section(decision) == f"## {heading}\n\n{sections[heading]}":
        del sections[heading]
        if not sections:
            del decision.extra["sections"]


def _options(doc: Document) -> list[str]:
    """The top-level items of `## Considered Options`, each on one line."""
    section = find_section(doc, OPTIONS_HEADINGS)
    if section is None:
        return []
    end = doc.section_end(section)
    items = [
        index
        for index in range(section.index + 1, end)
        if not doc.fenced[index] and LIST_MARKER.match(doc.lines[index])
    ]
    if not items:
        return []
    top = min(indentation(doc.lines[index]) for index in items)
    options = []
    for index in items:
        line = doc.lines[index]
        if indentation(line) != top:
            continue
        continuation, _ = item_continuation(doc, index, top)
        text = _one_line(" ".join([LIST_MARKER.sub("", line, count=1), *continuation]))
        if text and text not in ("…", "..."):
            options.append(text)
    return options


def _pros_and_cons(doc: Document) -> dict[str, str]:
    """Each `###` option under Pros and Cons, with the text of its section."""
    section = find_section(doc, PROS_CONS_HEADINGS)
    if section is None:
        return {}
    end = doc.section_end(section)
    return {
        _one_line(h.text): doc.section_text(h)
        for h in doc.headings
        if section.index < h.index < end and h.level == 3
    }


def _reason(option: str, reasons: dict[str, str]) -> str:
    """The case against `option`: its `Bad, because …` arguments, else its pros and cons text."""
    text = next((body for title, body in reasons.items() if _same(title, option)), "")
    against = []
    for line in text.split("\n"):
        item = LIST_MARKER.match(line)
        match = AGAINST.match(line[item.end() :]) if item else None
        if match and match["text"]:
            against.append(match["text"].strip())
    summary = "; ".join(against) if against else text
    return short_title(plain(summary))[0] if summary else ""


def _chosen_names(decision: str) -> list[str] | None:
    """What a `Chosen option(s): …` line names, or None when the decision has no such line.

    Options may be named by number (`Chosen options: 1 & 3`, `option 2`), in quotes or
    backticks, plainly up to `, because`, or, with nothing after the colon, by the list that
    follows.
    """
    lines = decision.split("\n")
    for index, line in enumerate(lines):
        match = CHOSEN.search(line.replace("**", "").replace("__", ""))
        if match is None:
            continue
        rest = match["rest"].strip(" *_\t")
        if not rest:
            items = _following_items(lines[index + 1 :])
            return [_one_line(LIST_MARKER.sub("", item, count=1)) for item in items]
        numbers = CHOSEN_NUMBERS.match(rest)
        if numbers:
            return re.findall(r"\d+", numbers.group(0))
        if rest[:1] in '"“`':
            return _quoted_names(rest)
        rest = re.split(r",?\s+because\b", rest, maxsplit=1)[0]
        return [name for name in (_option_name(part) for part in rest.split(" & ")) if name]
    return None


def _quoted_names(text: str) -> list[str]:
    """The quoted names at the head of `text`: `"A"`, or `` `A` & `B` `` and the like."""
    names = []
    while True:
        match = QUOTED.match(text)
        if match is None:
            return names
        names.append(_one_line(next(g for g in match.groups() if g)))
        text = re.sub(r"^\s*(?:&|,|\+|and)\s*", "", text[match.end() :], count=1)


def _match(name: str, options: list[str]) -> str | None:
    """The considered option `name` names: by number, by name, or as the one whose words
    include all of its words."""
    if name.isdigit():
        number = int(name)
        return options[number - 1] if 1 <= number <= len(options) else None
    exact = [option for option in options if _normal(option) == _normal(name)]
    same = exact or [option for option in options if _same(option, name)]
    if len(same) == 1:
        return same[0]
    words = _words(name)
    holding = [option for option in options if words and words <= _words(option)]
    return holding[0] if len(holding) == 1 else None


def _words(text: str) -> set[str]:
    """The words of `text`, lower case, a plural `s` dropped."""
    words = re.findall(r"\w+", _normal(text))
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words}


def _following_items(lines: list[str]) -> list[str]:
    """The top-level list items at the head of `lines` (blank lines before them skipped)."""
    items: list[str] = []
    for line in lines:
        if not line.strip():
            if items:
                break
            continue
        if not LIST_MARKER.match(line):
            if not items or not line.startswith((" ", "\t")):
                break
            continue
        if indentation(line) == 0:
            items.append(line.strip())
    return items


def chosen_option(decision: str) -> str | None:
    """The one option a decision names by name, which `write` lists first."""
    names = _chosen_names(decision)
    if not names or len(names) != 1 or names[0].isdigit():
        return None
    return names[0]


def _option_name(rest: str) -> str | None:
    if rest[:1] in QUOTES:
        close = rest.find(QUOTES[rest[0]], 1)
        name = rest[1:close] if close > 0 else rest[1:]
    else:
        name = re.split(r",|\s+because\b|\.\s|\.$", rest, maxsplit=1)[0]
    name = _one_line(name)
    return name or None


def _same(one: str, other: str) -> bool:
    """Whether two option names name the same option (links, emphasis and case aside)."""
    a, b = _normal(one), _normal(other)
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    return len(short) >= 6 and long.startswith(short)


def _normal(text: str) -> str:
    text = LINK.sub(r"\g<text>", text)
    text = re.sub("[*_`\"'“”\u2018\u2019]", "", text).lower()
    return " ".join(text.split()).strip(" .,:;")


def _one_line(text: str) -> str:
    return " ".join(COMMENT.sub("", text).split())


def is_pros_and_cons(heading: str) -> bool:
    return as_key(heading).rstrip(":") in PROS_CONS_HEADINGS


def keeps_pros_and_cons(decision: DecisionDoc, sections: dict[str, str]) -> bool:
    """Whether the file's own Pros and Cons section still gives every alternative its reason."""
    heading = next((h for h in sections if is_pros_and_cons(h)), None)
    if heading is None:
        return False
    doc = read("", f"## {heading}\n\n{sections[heading]}\n".encode())
    assert isinstance(doc, Document)  # our own text is UTF-8
    reasons = _pros_and_cons(doc)
    return all(_reason(a["option"], reasons) == a.get("reason", "") for a in decision.alternatives)


def pros_and_cons_section(decision: DecisionDoc) -> str:
    cases = [a for a in decision.alternatives if a.get("reason")]
    body = "\n\n".join(f"### {a['option']}\n\n* Bad, because {a['reason']}" for a in cases)
    return f"## Pros and Cons of the Options\n\n{body}" if cases else ""
