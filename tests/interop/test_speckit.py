"""spec-kit import (interop.formats.speckit): real feature folders, then small odd cases."""

from collections import Counter
from pathlib import Path
from textwrap import dedent

from interop.documents import CriterionDoc, Notice, Skip, Source, SpecDoc
from interop.formats import speckit

FIXTURES = Path(__file__).parents[1] / "fixtures" / "interop" / "speckit"


OLD_TEMPLATE = """
    # Feature Specification: Old
    ## Execution Flow (main)
    ```
    3. For each unclear aspect:
       → Mark with [NEEDS CLARIFICATION: specific question]
    ```
    ### Primary User Story
    As a user I log in.
    ### Acceptance Scenarios
    1. **Given** an account, **When** I log in, **Then** I see my page
    1. **Given** no account, **When** I log in, **Then** I am refused [NEEDS CLARIFICATION: which error?]
    """
CHECKED_TASKS = """
    ## Phase 1: Setup
    - [X] T001 [P] [US1] Create `src/app.py`
    - [ ] T002 [US12] Wire it
    - [ ] Not a task, only a checklist item
    """
HEADING_TASKS = """
    ---
    title: front matter
    ---
    ## Phase 1: Build
    - [ ] T001 Build it
    - [ ] T002 Build more
    ## Phase 2: Ship
    ### T003 - Ship it [P1]
    **Depends**: T002
    **Status**: Blocked
    **Acceptance**:
    - [ ] It ships
    ### T004: Announce
    """
ROUND_TRIP = [
    ("US1-AS1", "**Given** a, **When** b, **Then** c (User Story 1: Start)"),
    ("US1-AS3", "**Given** d\nover two lines (User Story 1: Start)"),
    ("AS1", "**Given** old template"),
    ("FR-001", "System MUST do it\n\n#### Scenario: kept\n- **WHEN** x"),
    ("SC-001", "It is fast"),
    ("path-configuration", "A slug key from OpenSpec"),
]


def _tree(name: str) -> dict[str, bytes]:
    root = FIXTURES / name
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _md(text: str) -> bytes:
    return dedent(text).lstrip("\n").encode()


def _keys(spec: SpecDoc) -> list[str]:
    return [criterion.key for criterion in spec.criteria]


def test_marketschema_features_parse_with_their_keys():
    parsed = speckit.parse(_tree("drillan-marketschema"))
    ids = ["001-core", "002-data-model", "002-data-model-rust", "003-http-client"]
    assert [spec.external_id for spec in parsed.specs] == ids
    assert [len(spec.criteria) for spec in parsed.specs] == [22, 46, 36, 54]
    stories = [f"US{n}-AS{k}" for n in (1, 2, 3) for k in (1, 2, 3)]
    requirements = [f"FR-{n:03}" for n in range(1, 10)] + [f"SC-{n:03}" for n in range(1, 5)]
    assert _keys(parsed.specs[0]) == stories + requirements
    assert parsed.specs[0].title == "Core Architecture"
    assert Counter(task.spec for task in parsed.tasks) == {
        "002-data-model": 61,
        "002-data-model-rust": 62,
        "003-http-client": 85,
    }
    assert parsed.skips == []


def test_marketschema_lettered_keys_and_japanese_text_pass_through():
    parsed = speckit.parse(_tree("drillan-marketschema"))
    rust = parsed.specs[2]
    assert [k for k in _keys(rust) if k.startswith("FR")] == [f"FR-R{n:03}" for n in range(1, 22)]
    assert [k for k in _keys(rust) if k.startswith("SC")] == [f"SC-R{n:03}" for n in range(1, 7)]
    fr1 = rust.criteria[9]
    assert fr1.key == "FR-R001"
    assert fr1.source == Source("specs/002-data-model-rust/spec.md", 72)
    assert fr1.text.startswith("生成前にすべての JSON Schema を json-refs でバンドルし")
    assert rust.criteria[0].text.endswith("(User Story 1: Rust struct の自動生成)")
    assert parsed.specs[1].title == "統一マーケットデータスキーマ"


def test_marketschema_phase_tasks_wait_for_the_whole_previous_phase():
    parsed = speckit.parse(_tree("drillan-marketschema"))
    tasks = {task.external_id: task for task in parsed.tasks}
    setup = ["T001", "T002", "T003", "T004", "T005", "T005b", "T006", "T007"]
    t010 = tasks["002-data-model/T010"]
    assert t010.depends_on == [f"002-data-model/{key}" for key in setup]
    assert t010.extra == {"key": "T010", "phase": "Phase 2: Foundational (Blocking Prerequisites)"}
    assert tasks["002-data-model/T001"].depends_on == []
    assert tasks["002-data-model/T003"].labels == ["parallel"]
    assert tasks["002-data-model/T001"].state == "done"
    assert tasks["002-data-model/T001"].spec == "002-data-model"


def test_claude_memory_plugin_reads_the_specify_prefix_past_front_matter():
    parsed = speckit.parse(_tree("GaZmagik-claude-memory-plugin"))
    base = ".specify/specs/feature"
    assert [spec.external_id for spec in parsed.specs] == [
        "001-memory-plugin",
        "002-v1.1.0-enhancements",
    ]
    assert [spec.title for spec in parsed.specs] == [
        "Claude Code Memory Plugin",
        "v1.1.0 Enhancements",
    ]
    assert [len(spec.criteria) for spec in parsed.specs] == [81, 120]
    nfr = [k for k in _keys(parsed.specs[1]) if k.startswith("NFR")]
    assert nfr == [f"NFR-{n:03}" for n in range(1, 23)]
    front = [n for n in parsed.notices if "front matter" in n.message]
    assert [n.source for n in front] == [
        Source(f"{base}/001-memory-plugin/tasks.md", 1),
        Source(f"{base}/002-v1.1.0-enhancements/tasks.md", 1),
    ]


def test_claude_memory_plugin_struck_requirement_is_a_skip_with_its_line():
    parsed = speckit.parse(_tree("GaZmagik-claude-memory-plugin"))
    path = ".specify/specs/feature/001-memory-plugin/spec.md"
    assert parsed.skips == [Skip(Source(path, 192), "FR-024 is marked removed")]
    keys = _keys(parsed.specs[0])
    assert len(keys) == 81
    assert "FR-024" not in keys
    assert keys[keys.index("FR-023") + 1] == "FR-025"


def test_claude_memory_plugin_tilde_marks_and_inline_depends():
    parsed = speckit.parse(_tree("GaZmagik-claude-memory-plugin"))
    tasks = {task.external_id: task for task in parsed.tasks}
    assert len(tasks) == 269
    assert Counter(task.state for task in parsed.tasks) == {"done": 266, "cancelled": 3}
    t144 = tasks["001-memory-plugin/T144"]
    assert (t144.state, t144.source_status, t144.labels) == ("cancelled", "[~]", ["us5"])
    t051 = tasks["001-memory-plugin/T051"]
    assert t051.depends_on == ["001-memory-plugin/T028", "001-memory-plugin/T048"]
    assert tasks["001-memory-plugin/T046"].labels == ["parallel", "us6"]
    done = [n for n in parsed.notices if n.message.endswith("done without evidence")]
    assert len(done) == 266


def test_jobmatch_older_template_scenarios_are_as_keys():
    parsed = speckit.parse(_tree("ddumdi11-JobMatchChecker"))
    specs = {spec.external_id: spec for spec in parsed.specs}
    navigation = specs["003-app-navigation-mit"]
    assert _keys(navigation) == [f"AS{k}" for k in range(1, 6)] + [
        f"FR-{n:03}" for n in range(1, 11)
    ]
    first = specs["001-profile-management-ui"].criteria[0]
    assert first.key == "AS1"
    assert first.source == Source("specs/001-profile-management-ui/spec.md", 65)
    assert first.text == (
        "**First-time Profile Creation (Auto-save)**\n"
        "- **Given** Nutzer öffnet App zum ersten Mal\n"
        "- **When** Nutzer gibt Name, Email und Standort ein\n"
        "- **Then** Daten werden nach 2 Sekunden automatisch gespeichert"
    )
    assert "FR-005a" in _keys(specs["001-profile-management-ui"])


def test_jobmatch_scenario_headings_make_one_criterion_each():
    parsed = speckit.parse(_tree("ddumdi11-JobMatchChecker"))
    backup = next(
        spec for spec in parsed.specs if spec.external_id == "004-database-backup-restore"
    )
    assert _keys(backup)[:6] == ["AS1", "AS2", "AS3", "AS4", "AS5", "FR-001"]
    first = backup.criteria[0]
    assert first.source == Source("specs/004-database-backup-restore/spec.md", 72)
    assert first.text.split("\n")[:3] == [
        "Manual Backup Creation",
        "",
        "1. **Given** the user is on the Settings page",
    ]
    assert first.text.endswith('5. **And** updates the "Last Backup" status indicator')


def test_jobmatch_clarification_markers_become_open_questions():
    parsed = speckit.parse(_tree("ddumdi11-JobMatchChecker"))
    specs = {spec.external_id: spec for spec in parsed.specs}
    questions = specs["002-profile-management-ui"].open_questions
    lines = [source.line for source, _ in questions]
    assert lines == [69, 78, 90, 115, 123, 124, 130, 135, 136, 155, 163]
    assert questions[0][1] == "What other preferences are needed? Industry, company size, benefits?"
    assert specs["001-profile-management-ui"].open_questions == []
    backup = specs["004-database-backup-restore"].open_questions
    assert [source.line for source, _ in backup] == [144, 145, 155, 160, 162]


def test_jobmatch_task_details_merge_into_their_checklist_task():
    parsed = speckit.parse(_tree("ddumdi11-JobMatchChecker"))
    tasks = {t.external_id: t for t in parsed.tasks if t.spec == "003-app-navigation-mit"}
    assert len(tasks) == 11
    t004 = tasks["003-app-navigation-mit/T004"]
    assert t004.source == Source("specs/003-app-navigation-mit/tasks.md", 47)
    assert t004.depends_on == ["003-app-navigation-mit/T002", "003-app-navigation-mit/T003"]
    assert t004.description.startswith("**File**: `src/renderer/App.tsx`\n**Requirements**:")
    t001 = tasks["003-app-navigation-mit/T001"]
    assert t001.acceptance == "Dependencies present in package.json, no errors on `npm install`."
    assert (t001.state, t001.source_status) == ("done", "[x]")


def test_jobmatch_heading_tasks_read_ranges_and_notes_in_dependencies():
    parsed = speckit.parse(_tree("ddumdi11-JobMatchChecker"))
    tasks = {t.extra["key"]: t for t in parsed.tasks if t.spec == "004-database-backup-restore"}
    assert len(tasks) == 28
    prefix = "004-database-backup-restore/"
    assert tasks["T018"].depends_on == [prefix + f"T0{n}" for n in range(13, 18)]
    assert tasks["T013"].depends_on == [prefix + key for key in ("T002", "T003", "T012", "T004")]
    assert tasks["T001"].depends_on == []
    assert tasks["T003"].title == "Create disk space utility"
    assert tasks["T003"].labels == ["parallel"]
    assert (tasks["T003"].state, tasks["T003"].source_status) == ("ready", None)


def test_jobmatch_bold_ids_letter_suffixes_and_loose_checklists():
    parsed = speckit.parse(_tree("ddumdi11-JobMatchChecker"))
    keys = [t.extra["key"] for t in parsed.tasks if t.spec == "001-profile-management-ui"]
    assert keys == [f"T{n:03}" for n in range(1, 11)] + ["T011A", "T011B"] + [
        f"T{n:03}" for n in range(12, 18)
    ]
    loose = [n for n in parsed.notices if "without a task id" in n.message]
    assert loose[0] == Notice(
        Source("specs/001-profile-management-ui/tasks.md", 323),
        "10 checklist items without a task id were not imported",
    )
    assert len(loose) == 3


def test_file_not_in_utf8_is_a_skip_at_line_one():
    files = {"specs/001-a/spec.md": "# Feature Specification: Café\n".encode("latin-1")}
    parsed = speckit.parse(files)
    assert parsed.specs == []
    assert parsed.skips == [
        Skip(
            Source("specs/001-a/spec.md", 1), "not UTF-8 (at byte offset 28); the file was not read"
        )
    ]


def test_spec_without_h1_takes_the_folder_name_and_says_so():
    parsed = speckit.parse({"docs/specs/007-no-title/spec.md": _md("- **FR-001**: It MUST work\n")})
    spec = parsed.specs[0]
    assert (spec.external_id, spec.title) == ("007-no-title", "007-no-title")
    assert parsed.notices == [
        Notice(
            Source("docs/specs/007-no-title/spec.md", 1),
            "no H1 title; the folder name is the title",
        )
    ]
    assert _keys(spec) == ["FR-001"]


def test_requirement_variants_without_dash_plain_and_wrapped():
    text = """
        # Feature Specification: Variants
        **FR-001**: System MUST accept a bold key without a dash
        FR-002: System MUST accept a plain key
        - **FR-003**: System MUST keep
          wrapped lines
        - **SC-001**: 95% of users finish
        """
    spec = speckit.parse({"specs/001-v/spec.md": _md(text)}).specs[0]
    assert [(c.key, c.text, c.source.line) for c in spec.criteria] == [
        ("FR-001", "System MUST accept a bold key without a dash", 2),
        ("FR-002", "System MUST accept a plain key", 3),
        ("FR-003", "System MUST keep\nwrapped lines", 4),
        ("SC-001", "95% of users finish", 6),
    ]
    assert all(c.proof == {"check": "review"} for c in spec.criteria)


def test_duplicate_key_is_a_skip_naming_its_line():
    text = """
        # Feature Specification: Twice
        - **FR-001**: First
        - **FR-002**: Second
        - **FR-001**: Again
        """
    parsed = speckit.parse({"specs/001-d/spec.md": _md(text)})
    assert _keys(parsed.specs[0]) == ["FR-001", "FR-002"]
    assert parsed.skips == [
        Skip(Source("specs/001-d/spec.md", 4), "duplicate criterion key FR-001 (first at line 2)")
    ]


def test_user_story_scenarios_keep_story_number_and_title():
    text = """
        # Feature Specification: Albums
        ### User Story 2 - Create albums (Priority: P1)
        **Acceptance Scenarios**:

        1. **Given** no albums, **When** I create one, **Then** it is listed
        2. *(Removed)*
        3. **Given** an album, **When** I rename it, **Then** the
           new name shows
        """
    parsed = speckit.parse({"specs/001-photo-albums/spec.md": _md(text)})
    spec = parsed.specs[0]
    assert _keys(spec) == ["US2-AS1", "US2-AS3"]
    assert spec.criteria[1].text == (
        "**Given** an album, **When** I rename it, **Then** the\nnew name shows (User Story 2: Create albums)"
    )
    assert parsed.skips == [
        Skip(Source("specs/001-photo-albums/spec.md", 6), "US2-AS2 is marked removed")
    ]


def test_older_template_and_repeated_numbers_use_positions():
    parsed = speckit.parse({"specs/002-old/spec.md": _md(OLD_TEMPLATE)})
    spec = parsed.specs[0]
    assert _keys(spec) == ["AS1", "AS2"]
    assert (
        spec.criteria[0].text == "**Given** an account, **When** I log in, **Then** I see my page"
    )
    assert spec.criteria[1].source == Source("specs/002-old/spec.md", 11)
    assert spec.open_questions == [(Source("specs/002-old/spec.md", 11), "which error?")]
    assert parsed.notices == [
        Notice(
            Source("specs/002-old/spec.md", 10),
            "scenario numbers [1, 1] do not increase; AS1… follow their order",
        )
    ]


def test_mapping_names_proofs_per_key_and_per_feature():
    text = "# Feature Specification: M\n- **FR-001**: a\n- **SC-001**: b\n- **SC-002**: c\n"
    mapping = {
        "FR-001": {"check": "tests", "select": "tests/test_x.py::*"},
        "SC-001": {"check": "evidence"},
        "001-m": {
            "SC-002": {"check": "evidence", "kind": "screenshot"},
            "SC-009": {"check": "review"},
        },
    }
    parsed = speckit.parse({"specs/001-m/spec.md": text.encode()}, mapping=mapping)
    assert [c.proof for c in parsed.specs[0].criteria] == [
        {"check": "tests", "select": "tests/test_x.py::*"},
        {"check": "review"},
        {"check": "evidence", "kind": "screenshot"},
    ]
    assert [n.message for n in parsed.notices] == [
        "the mapping gives SC-001 an unusable proof {'check': 'evidence'}; kept review",
        "the mapping names 001-m/SC-009, which no spec has",
    ]


def test_checked_tasks_are_done_with_a_notice_and_tags_become_labels():
    parsed = speckit.parse({"specs/001-t/tasks.md": _md(CHECKED_TASKS)})
    first, second = parsed.tasks
    assert (first.external_id, first.title, first.state, first.source_status) == (
        "001-t/T001",
        "Create `src/app.py`",
        "done",
        "[X]",
    )
    assert (first.labels, second.labels, second.state) == (["parallel", "us1"], ["us12"], "ready")
    assert [n.message for n in parsed.notices] == [
        "001-t has no readable spec.md; its tasks belong to no spec",
        "1 checklist items without a task id were not imported",
        "task T001 is done without evidence",
    ]
    assert first.spec is None


def test_heading_tasks_with_depends_override_phases_and_carry_priority():
    files = {"specs/001-h/spec.md": b"# S\n", "specs/001-h/tasks.md": _md(HEADING_TASKS)}
    tasks = {t.extra["key"]: t for t in speckit.parse(files).tasks}
    assert tasks["T003"].depends_on == ["001-h/T002"]
    assert tasks["T004"].depends_on == ["001-h/T001", "001-h/T002"]
    ship = tasks["T003"]
    assert (ship.title, ship.priority, ship.extra["priority"]) == ("Ship it", 3, "P1")
    assert (ship.state, ship.source_status, ship.spec) == ("blocked", "Blocked", "001-h")
    assert ship.acceptance == "- [ ] It ships"
    assert ship.source == Source("specs/001-h/tasks.md", 8)


def test_write_spec_round_trips_keys_and_texts():
    source = Source("x", 1)
    criteria = [CriterionDoc(key, text, source) for key, text in ROUND_TRIP]
    spec = SpecDoc("001-r", "Round trip", "", criteria, source, [(source, "Which one?")])
    written = speckit.write_spec(spec)
    parsed = speckit.parse({"specs/001-r/spec.md": written.encode()})
    back = parsed.specs[0]
    assert sorted((c.key, c.text) for c in back.criteria) == sorted(ROUND_TRIP)
    assert (back.title, [q for _, q in back.open_questions]) == ("Round trip", ["Which one?"])
    assert parsed.skips == []
    assert written.startswith("# Feature Specification: Round trip\n\n## User Scenarios & Testing")
    assert "### User Story 1 - Start\n\n**Acceptance Scenarios**:\n\n1. **Given** a," in written
    assert "- **FR-001**: System MUST do it\n\n    #### Scenario: kept\n" in written


def test_write_spec_round_trips_every_real_spec():
    for name in (
        "drillan-marketschema",
        "GaZmagik-claude-memory-plugin",
        "ddumdi11-JobMatchChecker",
    ):
        for spec in speckit.parse(_tree(name)).specs:
            written = speckit.write_spec(spec)
            back = speckit.parse({f"specs/{spec.external_id}/spec.md": written.encode()})
            assert [(c.key, c.text) for c in back.specs[0].criteria] == [
                (c.key, c.text) for c in spec.criteria
            ], spec.external_id
            assert back.skips == []
