"""``factory init``: the Factory Memory section of a repository's agent instruction files.

``AGENTS.md``, ``CLAUDE.md`` and ``GEMINI.md`` each get ``SECTION`` between ``START`` and
``END``: written where the markers are, appended where they are not, and nothing outside
them touched. Only the files that exist are written, and those asked for (``--file``);
with none of them there, ``AGENTS.md`` is made. ``check`` answers the files whose section
is missing or differs from ``SECTION`` (stale, or edited: a section changed to say "push
to main" is stale like any other). The MCP server offers the same text as its prompt
``work_through_factory_memory``.
"""

from __future__ import annotations

from pathlib import Path

from factory_client import files

START = "<!-- factory-memory:start -->"
END = "<!-- factory-memory:end -->"
NAMES = ("AGENTS.md", "CLAUDE.md", "GEMINI.md")
MAX_FILE = 1 << 20  # an instruction file larger than this is not rewritten

SECTION = """\
## Working in this repository through Factory Memory

The work here is planned, claimed and checked in Factory Memory, which keeps the specs,
the decisions in force and the evidence. Its API is at `$FACTORY_URL/api/v1/`; its MCP
server is at `$FACTORY_URL/mcp` (streamable HTTP), or run `factory-mcp --workspace .`
beside you (stdio, with `FACTORY_URL` and `FACTORY_TOKEN`).

1. **Claim** one task (`factory claim`, or the MCP tool `claim_task`); you hold it under
   a lease: heartbeat before it runs out. `factory work --agent NAME` does all of this
   for you and runs you headless.
2. **Read the brief** (`factory context KEY`, `get_context`, or `.factory/brief.md`):
   the spec's acceptance criteria and what each needs as proof, the decisions you must
   respect, and why earlier attempts ended. Change only the task's allowed paths.
3. **Evidence**: run the project's tests; attach what proves each criterion
   (`factory evidence`, `attach_evidence`). Your own reports are self-reported; the
   runner re-runs the tests and decides.
4. **Submit** the attempt with a summary (`factory submit`, `submit_attempt`), or
   release the task and say why; record any choice the next worker must respect as a
   decision (`propose_decision`).

Never push to the target branch (the project's default branch) or merge into it:
changes reach it only through review and Factory Memory's merge queue. Never commit
`.factory/`, never write secrets into the repository, and never approve your own work.
"""


def block() -> str:
    return f"{START}\n{SECTION}{END}\n"


class Unreadable(Exception):
    """An instruction file factory init will not rewrite (a link, too large, not text, or
    markers out of order); the message names it."""


def _read(repo: Path, name: str) -> str | None:
    try:
        with files.open_read(repo, name) as handle:
            content = handle.read(MAX_FILE + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except files.UnsafePath as exc:
        raise Unreadable(f"{name}: {exc}") from None
    if len(content) > MAX_FILE:
        raise Unreadable(f"{name} is larger than {MAX_FILE} bytes")
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable(f"{name} is not UTF-8 text") from None


def _span(text: str, name: str) -> tuple[int, int] | None:
    """Where the section (markers included, and the newline after the end) lies."""
    start, end = text.find(START), text.find(END)
    if start < 0 and end < 0:
        return None
    if start < 0 or end < start or text.count(START) != 1 or text.count(END) != 1:
        raise Unreadable(f"{name}: its factory-memory markers are not one start before one end")
    stop = end + len(END)
    if text[stop : stop + 1] == "\n":
        stop += 1
    return start, stop


def updated(text: str | None, name: str) -> str:
    """``text`` with the section as ``block()`` says; the rest unchanged."""
    if text is None or text == "":
        return block()
    span = _span(text, name)
    if span is None:
        return text + ("" if text.endswith("\n") else "\n") + "\n" + block()
    return text[: span[0]] + block() + text[span[1] :]


def targets(repo: Path, asked: list[str]) -> list[str]:
    """The files to write: those that exist, those asked for, else ``AGENTS.md``."""
    found = [name for name in NAMES if _read(repo, name) is not None]
    chosen = [name for name in NAMES if name in found or name in asked]
    return chosen or ["AGENTS.md"]


def write(repo: Path, asked: list[str]) -> list[tuple[str, str]]:
    """Write the section into each target; ``(name, "written"|"unchanged")`` for each."""
    done = []
    for name in targets(repo, asked):
        before = _read(repo, name)
        after = updated(before, name)
        if after == before:
            done.append((name, "unchanged"))
            continue
        files.write_file(repo, name, after)
        done.append((name, "written"))
    return done


def check(repo: Path, asked: list[str]) -> list[tuple[str, str]]:
    """``(name, why)`` for each target whose section is not exactly ``SECTION``."""
    stale = []
    for name in targets(repo, asked):
        try:
            text = _read(repo, name)
        except Unreadable as exc:
            stale.append((name, str(exc)))
            continue
        if text is None:
            stale.append((name, "missing"))
            continue
        try:
            span = _span(text, name)
        except Unreadable as exc:
            stale.append((name, str(exc)))
            continue
        if span is None:
            stale.append((name, "has no factory-memory section"))
        elif text[span[0] : span[1]].rstrip("\n") != block().rstrip("\n"):
            stale.append((name, "its factory-memory section differs from `factory init`'s"))
    return stale
