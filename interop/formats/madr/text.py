"""What reading and writing a MADR folder share: our front-matter keys, and the small
readers of MADR's Markdown text (a heading's key, text without emphasis)."""

from __future__ import annotations

import re

from interop.formats.markdown import Document, Heading

FM_KEY = "factory-memory"
ALL_ALTERNATIVES = "alternatives-listed"
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)]*)\)")


def own_number(external: str) -> str:
    """The number part of an external id: ``0005`` of ``docs/adr/0005``."""
    return external.rsplit("/", 1)[-1]


def as_key(text: str) -> str:
    return " ".join(text.replace("*", "").replace("_", " ").lower().split())


def find_section(doc: Document, names: set[str], level: int = 2) -> Heading | None:
    return next(
        (
            h
            for h in doc.headings
            if h.level == level and as_key(plain(h.text)).rstrip(":") in names
        ),
        None,
    )


def plain(text: str) -> str:
    """`text` without HTML comments and surrounding emphasis or quotes, on trimmed lines."""
    text = COMMENT.sub("", text).strip()
    for mark in ("**", "__"):
        if text.startswith(mark) and text.endswith(mark) and len(text) > 4:
            text = text[2:-2].strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text
