"""beads import and export (interop.formats.beads): real files, then small odd cases."""

import json
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from interop.documents import Skip, Source, TaskDoc
from interop.formats import beads

FIXTURES = Path(__file__).parents[1] / "fixtures" / "interop" / "beads"
ISSUES = ".beads/issues.jsonl"
COMPARED = [
    "external_id",
    "title",
    "description",
    "acceptance",
    "state",
    "source_status",
    "priority",
    "labels",
    "depends_on",
    "created_at",
    "closed_at",
    "extra",
]


def real(name: str) -> bytes:
    return (FIXTURES / name / ".beads" / "issues.jsonl").read_bytes()


def jsonl(*issues: object) -> dict[str, bytes]:
    lines = [item if isinstance(item, str) else json.dumps(item) for item in issues]
    return {ISSUES: ("\n".join(lines) + "\n").encode()}


def issue(id: str, **fields: object) -> dict:
    return {"id": id, "title": f"Task {id}", "status": "open", "priority": 2, **fields}


def blocks(id: str, on: str, kind: str = "blocks") -> dict:
    return {"issue_id": id, "depends_on_id": on, "type": kind, "created_at": "2025-10-14T12:00:00Z"}


def fields(task: TaskDoc) -> dict:
    return {name: getattr(task, name) for name in COMPARED}


def by_id(parsed) -> dict[str, TaskDoc]:
    return {task.external_id: task for task in parsed.tasks}


def test_beads_own_file_counts_and_states():
    parsed = beads.parse({ISSUES: real("steveyegge-beads")})
    assert len(parsed.tasks) == 527
    assert parsed.skips == []
    assert Counter(t.state for t in parsed.tasks) == {
        "done": 354,
        "cancelled": 99,
        "ready": 65,
        "draft": 9,
    }
    assert Counter(t.source_status for t in parsed.tasks if t.state == "draft") == {
        "deferred": 6,
        "pinned": 3,
    }
    assert sum(len(t.depends_on) for t in parsed.tasks) == 128


def test_beads_own_file_known_values():
    tasks = by_id(beads.parse({ISSUES: real("steveyegge-beads")}))
    hlsw = tasks["bd-hlsw"]
    assert hlsw.source == Source(ISSUES, 20)
    assert hlsw.extra["created_at"] == "2025-12-14T10:40:14.872875259-07:00"
    assert hlsw.created_at == datetime(
        2025, 12, 14, 10, 40, 14, 872875, tzinfo=timezone(timedelta(hours=-7))
    )
    assert tasks["bd-cbed9619.3"].depends_on == ["bd-cbed9619.5", "bd-cbed9619.4"]
    tomb = tasks["bd-kwro"]
    assert (tomb.state, tomb.source_status, tomb.priority) == ("cancelled", "tombstone", 4)
    assert {"deleted_at", "deleted_by", "delete_reason", "original_type"} <= set(tomb.extra)


def test_beads_own_file_writes_back_byte_for_byte():
    data = real("steveyegge-beads")
    written = beads.write(beads.parse({ISSUES: data}).tasks)
    original_lines = data.decode().splitlines()
    written_lines = written.decode().splitlines()
    assert len(written_lines) == 527
    assert [
        n for n, (a, b) in enumerate(zip(original_lines, written_lines, strict=True)) if a != b
    ] == []
    assert written == data


def test_skyhook_file_values_and_line_exact_round_trip():
    data = real("NVIDIA-skyhook")
    parsed = beads.parse({ISSUES: data})
    tasks = by_id(parsed)
    assert len(parsed.tasks) == 7
    assert tasks["skyhook-gld.6"].depends_on == [f"skyhook-gld.{n}" for n in range(1, 6)]
    assert tasks["skyhook-gld.1"].depends_on == []  # only a parent-child link
    assert (tasks["skyhook-gld.1"].priority, tasks["skyhook-gld.1"].extra["estimated_minutes"]) == (
        4,
        480,
    )
    assert tasks["skyhook-gld.4"].extra["comments"][0]["author"] == "Brian Lockwood"
    assert tasks["skyhook-gld.2"].acceptance.endswith(
        "Handles nil/empty CompartmentStatuses gracefully"
    )
    written = beads.write(parsed.tasks).decode().splitlines()
    assert [json.loads(line) for line in written] == [
        json.loads(line) for line in data.decode().splitlines()
    ]
    assert beads.write(parsed.tasks) == data


def test_real_files_round_trip_through_parse_again():
    for name in ("steveyegge-beads", "NVIDIA-skyhook"):
        first = beads.parse({ISSUES: real(name)})
        again = beads.parse({ISSUES: beads.write(first.tasks)})
        assert [fields(t) for t in again.tasks] == [fields(t) for t in first.tasks]
        assert again.notices == first.notices


def test_statuses_map_to_our_states_with_notices():
    statuses = [
        "open",
        "in_progress",
        "blocked",
        "closed",
        "hooked",
        "pinned",
        "deferred",
        "tombstone",
        "review",
    ]
    parsed = beads.parse(jsonl(*(issue(f"x-{n}", status=s) for n, s in enumerate(statuses))))
    assert [t.state for t in parsed.tasks] == [
        "ready",
        "ready",
        "blocked",
        "done",
        "ready",
        "draft",
        "draft",
        "cancelled",
        "draft",
    ]
    assert [t.source_status for t in parsed.tasks] == statuses
    assert [(n.source.line, n.message) for n in parsed.notices] == [
        (2, "in_progress imported as ready: who had claimed it is not imported"),
        (4, "closed imported as done without evidence"),
        (5, "hooked imported as ready: the agent it was hooked to is not imported"),
        (6, "pinned (a context marker, not work) imported as draft, so nobody claims it"),
        (7, "deferred imported as draft, so nobody claims it"),
        (8, "tombstone (deleted in beads) imported as cancelled"),
        (9, "unknown status 'review' imported as draft"),
    ]


def test_priority_is_reversed_and_odd_values_round_trip():
    lines = [
        issue("p0", priority=0),
        issue("p4", priority=4),
        issue("odd", priority=7),
        issue("text", priority="high"),
    ]
    bare = issue("bare")
    del bare["priority"]
    parsed = beads.parse(jsonl(*lines, bare))
    assert [t.priority for t in parsed.tasks] == [4, 0, 0, 2, 4]
    assert [n.message for n in parsed.notices] == [
        "priority 7 is not 0 to 4: read as 0",
        "priority 'high' is not 0 to 4: read as 2",
    ]
    written = [json.loads(line) for line in beads.write(parsed.tasks).splitlines()]
    assert [line.get("priority", "absent") for line in written] == [0, 4, 7, "high", "absent"]


def test_changed_priority_and_state_are_written_as_ours():
    task = beads.parse(jsonl(issue("a", priority=7, status="in_progress"))).tasks[0]
    task.priority = 3
    task.state = "done"
    line = json.loads(beads.write([task]))
    assert (line["priority"], line["status"]) == (1, "closed")


def test_timestamps_with_nanoseconds_parse_and_keep_their_text():
    stamps = ["2025-10-14T12:34:56.123456789-07:00", "2025-10-14T19:34:56Z", "yesterday"]
    parsed = beads.parse(jsonl(*(issue(f"t{n}", created_at=s) for n, s in enumerate(stamps))))
    first, second, third = parsed.tasks
    assert first.created_at == datetime(
        2025, 10, 14, 12, 34, 56, 123456, tzinfo=timezone(timedelta(hours=-7))
    )
    assert second.created_at == datetime(2025, 10, 14, 19, 34, 56, tzinfo=UTC)
    assert third.created_at is None
    assert [n.message for n in parsed.notices] == ["created_at 'yesterday' is not an RFC 3339 time"]
    written = [json.loads(line)["created_at"] for line in beads.write(parsed.tasks).splitlines()]
    assert written == stamps


def test_timestamp_format_is_go_rfc3339nano():
    moment = datetime(2025, 1, 2, 3, 4, 5, 120000, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert beads.format_timestamp(moment) == "2025-01-02T03:04:05.12+05:30"
    assert beads.format_timestamp(datetime(2025, 1, 2, tzinfo=UTC)) == "2025-01-02T00:00:00Z"
    assert beads.parse_timestamp("2025-01-02T03:04:05.12+05:30") == moment


def test_unreadable_lines_are_skips_with_their_line():
    parsed = beads.parse(
        jsonl(
            issue("a"),
            '{"id": "b", "title": ',
            "[1, 2]",
            json.dumps({"id": "c"}),
            "",
            json.dumps({"title": "no id"}),
            issue("a", title="again"),
        )
    )
    assert [t.external_id for t in parsed.tasks] == ["a"]
    assert [(s.source.line, s.reason) for s in parsed.skips] == [
        (2, "not JSON: Expecting value at column 22"),
        (3, "a JSON list, not an issue object"),
        (4, "no title: an issue needs an id and a title"),
        (6, "no id: an issue needs an id and a title"),
        (7, "duplicate id a: line 1 has it already"),
    ]


def test_non_utf8_line_is_a_skip():
    data = jsonl(issue("a"))[ISSUES] + b'{"id": "b", "title": "caf\xe9"}\n'
    parsed = beads.parse({ISSUES: data})
    assert [t.external_id for t in parsed.tasks] == ["a"]
    assert parsed.skips == [Skip(Source(ISSUES, 2), "not UTF-8 at column 26")]


def test_only_blocks_becomes_depends_on():
    kinds = ["blocks", "parent-child", "related", "discovered-from", "blocked-by"]
    deps = [blocks("b", "a", kind) for kind in kinds]
    parsed = beads.parse(jsonl(issue("a"), issue("b", dependencies=deps)))
    task = by_id(parsed)["b"]
    assert task.depends_on == ["a"]
    assert [d["type"] for d in task.extra["dependencies"]] == kinds
    assert parsed.notices == []


def test_dependency_on_missing_id_is_a_notice_and_round_trips():
    parsed = beads.parse(jsonl(issue("a", dependencies=[blocks("a", "gone-1")])))
    task = parsed.tasks[0]
    assert task.depends_on == []
    assert [(n.source.line, n.message) for n in parsed.notices] == [
        (1, "depends on gone-1, which is not in the file")
    ]
    line = json.loads(beads.write(parsed.tasks))
    assert line["dependencies"] == [blocks("a", "gone-1")]


def test_cycle_is_broken_at_the_closing_dependency():
    parsed = beads.parse(
        jsonl(
            issue("a", dependencies=[blocks("a", "b")]),
            issue("b", dependencies=[blocks("b", "c")]),
            issue("c", dependencies=[blocks("c", "a")]),
            issue("d", dependencies=[blocks("d", "d")]),
        )
    )
    tasks = by_id(parsed)
    assert [tasks[k].depends_on for k in "abcd"] == [["b"], ["c"], [], []]
    assert [(n.source.line, n.message) for n in parsed.notices] == [
        (4, "blocks itself: not imported"),
        (3, "dependency cycle a → b → c → a: c depending on a is not imported"),
    ]


def test_write_adds_and_drops_blocks_entries():
    parsed = beads.parse(
        jsonl(
            issue("a", created_at="2025-10-14T12:00:00Z"),
            issue(
                "b",
                created_at="2025-10-15T08:00:00Z",
                dependencies=[blocks("b", "a"), blocks("b", "a", "related")],
            ),
        )
    )
    first, second = parsed.tasks
    first.depends_on = ["b"]
    second.depends_on = []
    lines = [json.loads(line) for line in beads.write(parsed.tasks).splitlines()]
    assert lines[0]["dependencies"] == [
        {
            "issue_id": "a",
            "depends_on_id": "b",
            "type": "blocks",
            "created_at": "2025-10-14T12:00:00Z",
        }
    ]
    assert lines[1]["dependencies"] == [blocks("b", "a", "related")]


def test_write_escapes_and_orders_keys_as_bd_does():
    task = TaskDoc(
        external_id="bd-1",
        title="<b> & co",
        source=Source(ISSUES),
        description="naïve\u2028line",
        priority=3,
        labels=["ui"],
        extra={"zz_custom": 1, "issue_type": "task", "updated_at": "2025-10-14T12:00:00Z"},
    )
    line = beads.write([task]).decode()
    assert line == (
        '{"id":"bd-1","title":"\\u003cb\\u003e \\u0026 co","description":"naïve\\u2028line",'
        '"status":"open","priority":1,"issue_type":"task","updated_at":"2025-10-14T12:00:00Z",'
        '"labels":["ui"],"zz_custom":1}\n'
    )


def test_which_file_is_read():
    one = json.dumps(issue("a")).encode() + b"\n"
    parsed = beads.parse({ISSUES: one, ".beads/interactions.jsonl": b"{}\n"})
    assert [t.external_id for t in parsed.tasks] == ["a"]
    assert [(n.source.path, n.message) for n in parsed.notices] == [
        (".beads/interactions.jsonl", "not read: only .beads/issues.jsonl holds issues")
    ]
    assert [t.source.path for t in beads.parse({"export.jsonl": one}).tasks] == ["export.jsonl"]
    none = beads.parse({"a.jsonl": one, "b.jsonl": one})
    assert none.tasks == []
    assert none.skips[0].reason == (
        "no .beads/issues.jsonl in the upload and more than one .jsonl file (a.jsonl, b.jsonl)"
    )


def test_ten_thousand_lines_parse():
    issues = [
        issue(f"big-{n}", dependencies=[blocks(f"big-{n}", f"big-{n - 1}")])
        for n in range(1, 10_000)
    ]
    parsed = beads.parse(jsonl(issue("big-0"), *issues))
    assert len(parsed.tasks) == 10_000
    assert parsed.skips == [] and parsed.notices == []
    assert parsed.tasks[-1].depends_on == ["big-9998"]
    assert len(beads.write(parsed.tasks).splitlines()) == 10_000
