"""What an importer reads out of a team's files, before anything touches the database.

Each format module (`interop.formats.*`) turns files into these plain records and
`interop.services` writes them. Nothing here is a model: a parse can be shown as a dry-run
report, compared with what is stored, and thrown away.

Guarantees every format module keeps:
- every record names the file and the 1-based line it came from (`Source`);
- a piece that cannot be read becomes a `Skip` naming file, line and why, never an exception;
- a value we keep but could not map exactly (an unknown status, a task done without evidence)
  becomes a `Notice`, so the report says so;
- fields with no home in Factory Memory are kept verbatim in `extra`, so an export gives them
  back;
- the one exception: a file built to exhaust the reader (a YAML alias bomb) raises `Refusal`,
  and the whole upload is refused, naming file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime


@dataclass(frozen=True)
class Source:
    """Where a record came from: a POSIX path inside the folder or archive, and a 1-based line."""

    path: str
    line: int = 1

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class CriterionDoc:
    """An acceptance criterion. `key` is kept from the file (FR-001, SC-001, US1-AS2, …).

    `proof` is our check: `{"check": "review"}` unless a mapping names a test selector
    (`{"check": "tests", "select": "…"}`) or an evidence kind (`{"check": "evidence", "kind": "…"}`).
    """

    key: str
    text: str
    source: Source
    proof: dict = field(default_factory=lambda: {"check": "review"})


@dataclass
class SpecDoc:
    """A spec: a spec-kit feature folder or an OpenSpec capability.

    `external_id` is the folder name (`001-photo-albums`, `auth`); `body` is the Markdown as the
    file has it; `open_questions` are unresolved `[NEEDS CLARIFICATION: …]` markers, which keep
    the imported version proposed.
    """

    external_id: str
    title: str
    body: str
    criteria: list[CriterionDoc]
    source: Source
    open_questions: list[tuple[Source, str]] = field(default_factory=list)


@dataclass
class TaskDoc:
    """A task: a spec-kit or OpenSpec tasks.md item, or a beads issue.

    `state` is ours: one of draft, ready, blocked, done, cancelled. `source_status` is the
    status exactly as the file wrote it. `priority` is ours (higher is claimed first).
    `depends_on` holds external ids of other tasks; `spec` and `decision` the external id of the
    SpecDoc or DecisionDoc it belongs to. `extra` keeps every field without a home, verbatim.
    """

    external_id: str
    title: str
    source: Source
    description: str = ""
    acceptance: str = ""
    state: str = "ready"
    source_status: str | None = None
    priority: int = 0
    labels: list[str] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    spec: str | None = None
    decision: str | None = None
    created_at: datetime | None = None
    closed_at: datetime | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class DecisionDoc:
    """A decision: an ADR (MADR 2, 3 or 4) or an OpenSpec change.

    `state` is ours: proposed, accepted, rejected or superseded (deprecated maps to superseded
    with no successor, and says so in a Notice). `number` is the ADR's own number, kept.
    `alternatives` is our shape: `[{"option": "…", "reason": "…"}]`. `supersedes` holds external
    ids. `amends` holds the specs as they would read with this decision applied (an OpenSpec
    change's delta applied to the current spec), which become the decision's amendments.
    """

    external_id: str
    title: str
    source: Source
    number: int | None = None
    state: str = "proposed"
    source_status: str | None = None
    date: date | None = None
    deciders: list[str] = field(default_factory=list)
    consulted: list[str] = field(default_factory=list)
    informed: list[str] = field(default_factory=list)
    context: str = ""
    decision: str = ""
    consequences: str = ""
    alternatives: list[dict] = field(default_factory=list)
    supersedes: list[str] = field(default_factory=list)
    amends: list[SpecDoc] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


class Refusal(Exception):
    """An upload no part of which is imported: ``code`` (stable), where, and why."""

    def __init__(self, code: str, source: Source, reason: str):
        super().__init__(f"{source}: {reason}")
        self.code, self.source, self.reason = code, source, reason


@dataclass
class Skip:
    """A piece of a file that was not imported, and why."""

    source: Source
    reason: str


@dataclass
class Notice:
    """Something imported that the report must mention: a mapped status, a guess, a loss."""

    source: Source
    message: str


@dataclass
class Parsed:
    """Everything one format read out of one folder or file."""

    specs: list[SpecDoc] = field(default_factory=list)
    tasks: list[TaskDoc] = field(default_factory=list)
    decisions: list[DecisionDoc] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


def break_cycles(tasks: list[TaskDoc], parsed: Parsed) -> None:
    """Drop each dependency that closes a cycle, with a Notice naming the cycle.

    An iterative depth-first walk in file order: a dependency on a task still on the walk's
    path closes a cycle. Every task and dependency is visited once.
    """
    by_id = {task.external_id: task for task in tasks}
    done: set[str] = set()
    for root in tasks:
        if root.external_id in done:
            continue
        path = [root.external_id]
        position = {root.external_id: 0}
        stack = [iter(list(root.depends_on))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                node = path.pop()
                del position[node]
                done.add(node)
                stack.pop()
                continue
            if target in position:
                _drop_cycle_edge(by_id[path[-1]], target, path[position[target] :], parsed)
            elif target not in done:
                position[target] = len(path)
                path.append(target)
                stack.append(iter(list(by_id[target].depends_on)))


def _drop_cycle_edge(task: TaskDoc, target: str, cycle: list[str], parsed: Parsed) -> None:
    task.depends_on.remove(target)
    loop = " → ".join([*cycle, target])
    parsed.notices.append(
        Notice(
            task.source,
            f"dependency cycle {loop}: {task.external_id} depending on {target} is not imported",
        )
    )
