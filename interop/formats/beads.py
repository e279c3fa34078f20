"""beads (steveyegge/beads) issue files: `.beads/issues.jsonl`, one JSON object a line.

Reading (`parse`):
- the file is `.beads/issues.jsonl`, else the older `.beads/beads.jsonl`, else the one `*.jsonl`
  in the upload; other `.jsonl` files beside it (`interactions.jsonl`, …) get a Notice.
- each line is a TaskDoc: `id` → external id, `title`, `description`, `acceptance_criteria` →
  acceptance, `labels`, `created_at` and `closed_at` (RFC 3339, nanoseconds cut to
  microseconds). Every other key (`design`, `notes`, `issue_type`, `assignee`, `updated_at`,
  `close_reason`, `comments`, `content_hash`, …) is kept verbatim in `extra`, and so are the
  original `created_at`/`closed_at` strings and the whole `dependencies` list.
- beads priority 0 (highest) to 4 becomes ours 4 to 0. A line without `priority` is P0: bd
  before December 2025 left a zero priority out (`omitempty`). Any other value is kept in
  `extra` and read as 2, the beads default, with a Notice. Keys a line left out that ours
  stands in for (`priority`, `status`) are listed in `extra["_omitted"]`, so export leaves them
  out again while ours is unchanged.
- statuses: open → ready; in_progress and hooked → ready (a claim is not imported); blocked →
  blocked; closed → done (without evidence); deferred and pinned → draft (not to be claimed);
  tombstone → cancelled; anything else → draft. All but open and blocked get a Notice, and
  `source_status` keeps the status as written.
- only a `blocks` dependency becomes `depends_on`; `parent-child`, `related`,
  `discovered-from` and the rest stay in `extra["dependencies"]`. A dependency on an id that is
  not in the file is not imported (Notice). A cycle of `blocks` dependencies is broken: the
  dependency that closes it is not imported and a Notice names the cycle, so the database never
  holds a cycle. Such a dependency is not exported again either. A dependency on the issue
  itself is not imported either (Notice).
- a line that is not JSON, not an object, or has no string `id` and `title` is a Skip with
  its line; so is a second line with an id already seen, naming both lines.

Writing (`write`) gives beads JSONL as bd writes it: compact JSON, `<`, `>` and `&` escaped as
bd's Go encoder escapes them, keys in bd's order, every `extra` key given back. A value kept
in `extra` is written instead of ours while ours is still what it was read as, so a file read
and written again gives back each line's object, and for a file bd wrote, each line's bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone

from interop.documents import Notice, Parsed, Skip, Source, TaskDoc, break_cycles

ISSUES_PATHS = (".beads/issues.jsonl", ".beads/beads.jsonl")
DEFAULT_PRIORITY = 2
# Keys ours stands in for when they were absent from the line, and what ours then held.
OMITTED = "_omitted"
ABSENT_PRIORITY = 4
ABSENT_STATE = "ready"

# bd's Issue fields in the order its Go struct declares them, with fields older versions
# exported put where those versions wrote them (read from bd's own .beads history).
KEY_ORDER = (
    "id",
    "content_hash",
    "title",
    "description",
    "design",
    "acceptance_criteria",
    "notes",
    "spec_id",
    "status",
    "priority",
    "issue_type",
    "assignee",
    "owner",
    "estimated_minutes",
    "created_at",
    "created_by",
    "updated_at",
    "started_at",
    "closed_at",
    "close_reason",
    "closed_by_session",
    "due_at",
    "defer_until",
    "external_ref",
    "source_repo",
    "source_system",
    "metadata",
    "compaction_level",
    "compacted_at",
    "compacted_at_commit",
    "original_size",
    "labels",
    "hook_bead",
    "dependencies",
    "comments",
    "deleted_at",
    "deleted_by",
    "delete_reason",
    "original_type",
    "superseded_by",
    "duplicate_of",
    "sender",
    "wisp",
    "ephemeral",
    "replies_to",
    "no_history",
    "wisp_type",
    "pinned",
    "is_template",
    "bonded_from",
    "await_type",
    "await_id",
    "timeout",
    "waiters",
    "source_formula",
    "source_location",
    "mol_type",
    "work_type",
    "event_kind",
    "actor",
    "target",
    "payload",
)
KEY_RANK = {key: rank for rank, key in enumerate(KEY_ORDER)}

STATES = {
    "open": "ready",
    "in_progress": "ready",
    "hooked": "ready",
    "blocked": "blocked",
    "closed": "done",
    "deferred": "draft",
    "pinned": "draft",
    "tombstone": "cancelled",
}
STATUS_NOTICES = {
    "in_progress": "in_progress imported as ready: who had claimed it is not imported",
    "hooked": "hooked imported as ready: the agent it was hooked to is not imported",
    "closed": "closed imported as done without evidence",
    "deferred": "deferred imported as draft, so nobody claims it",
    "pinned": "pinned (a context marker, not work) imported as draft, so nobody claims it",
    "tombstone": "tombstone (deleted in beads) imported as cancelled",
}
EXPORTED_STATUS = {
    "ready": "open",
    "blocked": "blocked",
    "done": "closed",
    "cancelled": "closed",
    "draft": "deferred",
}

TIMESTAMP = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})$"
)
GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
ZERO_TIME = "0001-01-01T00:00:00Z"


def parse(files: Mapping[str, bytes]) -> Parsed:
    """Every issue of the upload's beads file as a TaskDoc; nothing raises.

    Runs in time linear in the file: one pass reads the lines, one resolves dependencies and
    one breaks cycles.
    """
    parsed = Parsed()
    path = _issues_path(files, parsed)
    if path is None:
        return parsed
    tasks: list[TaskDoc] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(files[path].split(b"\n"), start=1):
        task = _read_line(Source(path, number), raw, parsed)
        if task is None:
            continue
        seen = first_line.get(task.external_id)
        if seen is not None:
            parsed.skips.append(
                Skip(task.source, f"duplicate id {task.external_id}: line {seen} has it already")
            )
            continue
        first_line[task.external_id] = number
        tasks.append(task)
    _resolve_dependencies(tasks, parsed)
    break_cycles(tasks, parsed)
    parsed.tasks = tasks
    return parsed


def write(tasks: list[TaskDoc]) -> bytes:
    """`tasks` as a beads JSONL file, one line each, in the order given.

    Each line holds the task's fields under beads' keys and every `extra` key, in bd's key
    order (keys bd does not know follow, in `extra`'s order).
    """
    written = {task.external_id for task in tasks}
    lines = [_encode(_issue(task, written)) for task in tasks]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def parse_timestamp(text: str) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime, digits past microseconds dropped; else None."""
    match = TIMESTAMP.match(text)
    if not match:
        return None
    fraction = (match["frac"] or "")[:6].ljust(6, "0")
    zone = match["zone"]
    if zone in ("Z", "z"):
        tz: timezone = UTC
    else:
        sign = -1 if zone[0] == "-" else 1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        moment = datetime.fromisoformat(f"{match['date']}T{match['time']}.{fraction}")
    except ValueError:
        return None
    return moment.replace(tzinfo=tz)


def format_timestamp(moment: datetime) -> str:
    """`moment` as Go's RFC3339Nano writes it: no trailing zeros in the fraction, `Z` for UTC.

    A naive datetime is taken as UTC.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{moment.microsecond:06d}".rstrip("0")
    if fraction:
        text += "." + fraction
    offset = moment.utcoffset() or timedelta(0)
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _issues_path(files: Mapping[str, bytes], parsed: Parsed) -> str | None:
    """The path of the file to read; other JSONL files get a Notice, none at all a Skip."""
    jsonl = sorted(path for path in files if path.endswith(".jsonl"))
    chosen = next((path for path in ISSUES_PATHS if path in files), None)
    if chosen is None and len(jsonl) == 1:
        chosen = jsonl[0]
    if chosen is None:
        reason = "no .beads/issues.jsonl in the upload"
        if jsonl:
            reason += f" and more than one .jsonl file ({', '.join(jsonl)})"
        parsed.skips.append(Skip(Source(ISSUES_PATHS[0]), reason))
        return None
    for other in jsonl:
        if other != chosen:
            parsed.notices.append(Notice(Source(other), f"not read: only {chosen} holds issues"))
    return chosen


def _read_line(source: Source, raw: bytes, parsed: Parsed) -> TaskDoc | None:
    """The TaskDoc one line holds, or None (with a Skip, unless the line is blank)."""
    raw = raw.removesuffix(b"\r")
    if not raw.strip():
        return None
    try:
        issue = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        parsed.skips.append(Skip(source, f"not UTF-8 at column {error.start + 1}"))
        return None
    except json.JSONDecodeError as error:
        parsed.skips.append(Skip(source, f"not JSON: {error.msg} at column {error.colno}"))
        return None
    if not isinstance(issue, dict):
        parsed.skips.append(Skip(source, f"a JSON {type(issue).__name__}, not an issue object"))
        return None
    for key in ("id", "title"):
        if not isinstance(issue.get(key), str) or not issue[key].strip():
            parsed.skips.append(Skip(source, f"no {key}: an issue needs an id and a title"))
            return None
    return _task(source, issue, parsed)


def _task(source: Source, issue: dict, parsed: Parsed) -> TaskDoc:
    """The TaskDoc for one issue object; keys without a home go to `extra` verbatim."""
    extra = {key: value for key, value in issue.items() if key not in ("id", "title")}
    task = TaskDoc(external_id=issue["id"], title=issue["title"], source=source, extra=extra)
    task.description = _text(extra, "description")
    task.acceptance = _text(extra, "acceptance_criteria")
    task.labels = _labels(extra)
    _read_status(task, parsed)
    _read_priority(task, parsed)
    task.created_at = _timestamp(task, "created_at", parsed)
    task.closed_at = _timestamp(task, "closed_at", parsed)
    return task


def _text(extra: dict, key: str) -> str:
    """A non-empty string field, taken out of `extra`; anything else stays there and gives ""."""
    value = extra.get(key)
    if isinstance(value, str) and value:
        del extra[key]
        return value
    return ""


def _labels(extra: dict) -> list[str]:
    """A non-empty list of string labels, taken out of `extra`; anything else stays there."""
    value = extra.get("labels")
    if isinstance(value, list) and value and all(isinstance(label, str) for label in value):
        del extra["labels"]
        return list(value)
    return []


def _omit(task: TaskDoc, key: str) -> None:
    task.extra.setdefault(OMITTED, []).append(key)


def _read_status(task: TaskDoc, parsed: Parsed) -> None:
    if "status" not in task.extra:
        _omit(task, "status")
        task.state = ABSENT_STATE
        return
    status = task.extra.pop("status")
    if not isinstance(status, str):
        task.extra["status"] = status
        task.state = "draft"
        parsed.notices.append(Notice(task.source, f"status {status!r} is not text: read as draft"))
        return
    task.source_status = status
    task.state = STATES.get(status, "draft")
    message = STATUS_NOTICES.get(status)
    if status not in STATES:
        message = f"unknown status {status!r} imported as draft"
    if message:
        parsed.notices.append(Notice(task.source, message))


def _priority_of(value: object) -> int:
    """Our priority for a beads priority value: 4 - p, clamped; 2 for a value that is no number."""
    if isinstance(value, bool) or not isinstance(value, int):
        return DEFAULT_PRIORITY
    return 4 - min(max(value, 0), 4)


def _read_priority(task: TaskDoc, parsed: Parsed) -> None:
    if "priority" not in task.extra:
        _omit(task, "priority")
        task.priority = ABSENT_PRIORITY
        return
    value = task.extra["priority"]
    task.priority = _priority_of(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4:
        del task.extra["priority"]
        return
    parsed.notices.append(
        Notice(task.source, f"priority {value!r} is not 0 to 4: read as {task.priority}")
    )


def _timestamp(task: TaskDoc, key: str, parsed: Parsed) -> datetime | None:
    """The parsed timestamp under `key`; its string stays in `extra` to be written back."""
    value = task.extra.get(key)
    if value is None:
        return None
    moment = parse_timestamp(value) if isinstance(value, str) else None
    if moment is None:
        parsed.notices.append(Notice(task.source, f"{key} {value!r} is not an RFC 3339 time"))
    return moment


def _resolve_dependencies(tasks: list[TaskDoc], parsed: Parsed) -> None:
    """Fill `depends_on` from each task's `blocks` dependencies on ids the file holds."""
    ids = {task.external_id for task in tasks}
    for task in tasks:
        dependencies = task.extra.get("dependencies")
        if dependencies is None:
            continue
        if not isinstance(dependencies, list):
            parsed.notices.append(Notice(task.source, "dependencies is not a list: not imported"))
            continue
        for target in _blocking_targets(dependencies):
            if target == task.external_id:
                parsed.notices.append(Notice(task.source, "blocks itself: not imported"))
            elif target not in ids:
                parsed.notices.append(
                    Notice(task.source, f"depends on {target}, which is not in the file")
                )
            elif target not in task.depends_on:
                task.depends_on.append(target)


def _blocking_targets(dependencies: list) -> list[str]:
    """The `depends_on_id` of each `blocks` dependency, in file order."""
    return [
        dependency["depends_on_id"]
        for dependency in dependencies
        if _is_blocking(dependency) and isinstance(dependency.get("depends_on_id"), str)
    ]


def _is_blocking(dependency: object) -> bool:
    return isinstance(dependency, dict) and dependency.get("type") == "blocks"


def _issue(task: TaskDoc, written: set[str]) -> dict:
    """The beads object for `task`, keys in bd's order."""
    extra = dict(task.extra)
    omitted = set(extra.pop(OMITTED, []))
    fields: dict = {"id": task.external_id, "title": task.title}
    fields.update(extra)
    _put_text(fields, "description", task.description)
    _put_text(fields, "acceptance_criteria", task.acceptance)
    _put_status(fields, task, omitted)
    _put_priority(fields, task, omitted)
    _put_timestamp(fields, "created_at", task.created_at)
    _put_timestamp(fields, "closed_at", task.closed_at)
    if task.labels:
        fields["labels"] = list(task.labels)
    dependencies = _dependencies(task, written)
    if dependencies is not None:
        fields["dependencies"] = dependencies
    return _ordered(fields, list(extra))


def _put_text(fields: dict, key: str, value: str) -> None:
    if value:
        fields[key] = value


def _put_status(fields: dict, task: TaskDoc, omitted: set[str]) -> None:
    if "status" in omitted and task.state == ABSENT_STATE:
        return
    if task.source_status is not None and STATES.get(task.source_status, "draft") == task.state:
        fields["status"] = task.source_status
    elif "status" in fields and task.state == "draft":
        return  # a status that was not text, kept as the file had it
    else:
        fields["status"] = EXPORTED_STATUS.get(task.state, "open")


def _put_priority(fields: dict, task: TaskDoc, omitted: set[str]) -> None:
    if "priority" in omitted and task.priority == ABSENT_PRIORITY:
        return
    kept = fields.get("priority")
    if "priority" in fields and _priority_of(kept) == task.priority:
        return
    fields["priority"] = 4 - min(max(task.priority, 0), 4)


def _put_timestamp(fields: dict, key: str, moment: datetime | None) -> None:
    kept = fields.get(key)
    parsed = parse_timestamp(kept) if isinstance(kept, str) else None
    if moment is None:
        if parsed is not None:
            del fields[key]  # the time was cleared since; one that never parsed stays as it was
        return
    if parsed != moment:
        fields[key] = format_timestamp(moment)


def _dependencies(task: TaskDoc, written: set[str]) -> list | None:
    """The `dependencies` list: the file's entries, less the `blocks` ones ours dropped.

    A kept `blocks` entry is one whose target is still in `depends_on`, or is not among the
    tasks written (it pointed outside the file when read, and still does). A `depends_on` with
    no entry gets a new one, dated as the task was created.
    """
    original = task.extra.get("dependencies")
    if not isinstance(original, list):
        if not task.depends_on:
            return original if "dependencies" in task.extra else None
        original = []
    wanted = set(task.depends_on)
    kept = []
    present: set[str] = set()
    for dependency in original:
        target = dependency.get("depends_on_id") if _is_blocking(dependency) else None
        if target is None or target in wanted or target not in written:
            kept.append(dependency)
            present.add(target)
    for target in task.depends_on:
        if target not in present:
            kept.append(_new_dependency(task, target))
    if not kept and "dependencies" not in task.extra:
        return None
    return kept


def _new_dependency(task: TaskDoc, target: str) -> dict:
    created = task.extra.get("created_at")
    if not isinstance(created, str):
        created = format_timestamp(task.created_at) if task.created_at else ZERO_TIME
    return {
        "issue_id": task.external_id,
        "depends_on_id": target,
        "type": "blocks",
        "created_at": created,
    }


def _ordered(fields: dict, extra_keys: list[str]) -> dict:
    """`fields` in bd's key order; keys bd does not know follow in the order `extra` had them."""
    unknown = [key for key in extra_keys if key not in KEY_RANK]
    known = sorted((key for key in fields if key in KEY_RANK), key=KEY_RANK.__getitem__)
    return {key: fields[key] for key in [*known, *unknown]}


def _encode(issue: dict) -> str:
    """One line as bd's Go encoder writes it (compact; `<`, `>`, `&`, U+2028/9 escaped)."""
    text = json.dumps(issue, ensure_ascii=False, separators=(",", ":"))
    return text.translate(GO_ESCAPES)
