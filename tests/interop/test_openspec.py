"""OpenSpec import (interop.formats.openspec): real trees, then small odd cases."""

from collections import Counter
from datetime import date
from pathlib import Path
from textwrap import dedent

from interop.documents import Notice, Skip, Source
from interop.formats import openspec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "interop" / "openspec"
CAPABILITY = """
    # Photos Specification

    ## Purpose
    Keep photos.

    ## Requirements
    ### Requirement: Upload
    The system SHALL accept uploads.

    #### Scenario: Upload a photo
    - **WHEN** a user uploads a JPEG
    - **THEN** it is stored

    ### Requirement: Delete
    The system SHALL delete photos.

    #### Scenario: Delete a photo
    - **WHEN** a user deletes a photo
    - **THEN** it is gone

    ### Requirement: Share
    The system MUST share albums.

    ## Notes
    Kept as written.
    """


FISSION_CAPABILITIES = [
    "ai-tool-paths",
    "cli-init",
    "cli-update",
    "command-generation",
    "legacy-cleanup",
]
FLEXYFIELD_ARCHIVE = "openspec/changes/archive"
FLEXYFIELD_CAPABILITIES = [
    "dynamic-field-storage",
    "field-set-management",
    "field-validation",
    "query-integration",
    "type-system",
]
FLEXYFIELD_SKIPS = [
    ("query-integration", 202),
    ("testing", 206),
    ("testing", 222),
    ("testing", 250),
    ("testing", 268),
    ("type-system", 123),
    ("query-integration", 34),
]
FULL_DELTA = """
    ## RENAMED Requirements
    - FROM: `### Requirement: Share`
    - TO: `### Requirement: Share albums`
    ## REMOVED Requirements
    ### Requirement: Delete
    ## MODIFIED Requirements
    ### Requirement: Upload
    The system SHALL accept uploads up to 20 MB.

    #### Scenario: Upload a photo
    - **WHEN** a user uploads a JPEG
    - **THEN** it is stored
    ## ADDED Requirements
    ### Requirement: Albums
    The system SHALL group photos into albums.
    """
MISSING_DELTA = """
    ## MODIFIED Requirements
    ### Requirement: upload
    The system SHALL accept more.
    ## REMOVED Requirements
    - `### Requirement: Archive`
    ## RENAMED Requirements
    - FROM: ### Requirement: Gone
    - TO: ### Requirement: Back
    """
FOREIGN_SPEC = """
    # 安全
    ## Requirements
    ### Requirement: 解封模板与密封一致
    系统 SHALL 以与密封时相同的模板现场派生 primary。

    #### Scenario: 重启后解封
    - **WHEN** 重启
    - **THEN** 解封成功
    ### Requirement: Optional export
    The system MAY export photos.
    """
WRAPPED_SPEC = """
    ## Requirements
    ### Requirement: Retry uploads
    The system SHALL retry
    failed uploads.

    #### Scenario: Network drops
    - **GIVEN** a slow network
    - **WHEN** an upload fails part way
      through the file
    - **THEN** it retries
    """
CHANGE_TASKS = """
    # Tasks
    ## 1. Build
    - [x] 1.1 Build it
    - [ ] Build more
    ## 2. Ship
    - [~] 2.1 Ship it
    """


def _tree(name: str) -> dict[str, bytes]:
    root = FIXTURES / name
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _md(text: str) -> bytes:
    return dedent(text).lstrip("\n").encode()


def _change(delta: str, *, cap: str = "photos", change: str = "add-albums") -> dict[str, bytes]:
    return {
        "openspec/specs/photos/spec.md": _md(CAPABILITY),
        f"openspec/changes/{change}/proposal.md": _md("# Change: Albums\n## Why\nPeople asked.\n"),
        f"openspec/changes/{change}/specs/{cap}/spec.md": _md(delta),
    }


def test_fission_current_specs_parse_with_exact_counts():
    parsed = openspec.parse(_tree("Fission-AI-OpenSpec"))
    specs = {spec.external_id: spec for spec in parsed.specs}
    assert list(specs) == FISSION_CAPABILITIES
    assert [len(spec.criteria) for spec in specs.values()] == [3, 16, 7, 5, 6]
    assert [spec.title for spec in specs.values()][:3] == [
        "ai-tool-paths Specification",
        "CLI Init Specification",
        "Update Command Specification",
    ]
    assert (parsed.skips, len(parsed.decisions), len(parsed.tasks)) == ([], 3, 38)


def test_fission_requirements_become_slug_keyed_criteria():
    parsed = openspec.parse(_tree("Fission-AI-OpenSpec"))
    paths = parsed.specs[0]
    assert [c.key for c in paths.criteria] == [
        "aitooloption-skillsdir-field",
        "path-configuration-for-su-7dfea2",
        "cross-platform-path-handling",
    ]
    first = paths.criteria[0]
    assert first.source == Source("openspec/specs/ai-tool-paths/spec.md", 6)
    assert first.text.startswith(
        "AIToolOption skillsDir field\n\nThe `AIToolOption` interface SHALL"
    )
    assert first.proof == {"check": "review"}


def test_fission_open_change_is_a_proposed_decision():
    parsed = openspec.parse(_tree("Fission-AI-OpenSpec"))
    devin = next(d for d in parsed.decisions if d.external_id == "add-devin-desktop-support")
    assert (devin.state, devin.date, devin.title) == (
        "proposed",
        date(2026, 6, 4),
        "add-devin-desktop-support",
    )
    assert devin.context.startswith("- Windsurf has been [rebranded to **Devin Desktop**]")
    assert devin.decision.startswith("- **Rename the tool, don't duplicate it.**")
    assert devin.consequences.startswith("- **Specs:** `ai-tool-paths`, `cli-init`")
    assert list(devin.extra["sections"]) == ["Notes"]
    assert devin.extra["metadata"] == "schema: spec-driven\ncreated: 2026-06-04\n"


def test_fission_open_change_amends_specs_with_its_delta_applied():
    parsed = openspec.parse(_tree("Fission-AI-OpenSpec"))
    devin = next(d for d in parsed.decisions if d.external_id == "add-devin-desktop-support")
    assert [spec.external_id for spec in devin.amends] == FISSION_CAPABILITIES[:4]
    paths = devin.amends[0]
    assert [c.key for c in paths.criteria][-1] == "migrating-openspec-conten-32af3a"
    modified = paths.criteria[1]
    delta = "openspec/changes/add-devin-desktop-support/specs/ai-tool-paths/spec.md"
    assert paths.source == Source(delta, 1)
    assert modified.source == Source(delta, 87)
    assert "#### Scenario: Devin Desktop paths defined" in modified.text
    assert "`skillsDir` SHALL be `.windsurf`" not in paths.body
    assert [len(spec.criteria) for spec in devin.amends] == [4, 16, 7, 5]


def test_fission_delta_on_a_new_capability_creates_it():
    parsed = openspec.parse(_tree("Fission-AI-OpenSpec"))
    omp = next(d for d in parsed.decisions if d.external_id == "feat-add-omp-tool-support")
    created = omp.amends[2]
    assert (created.external_id, created.title) == ("oh-my-pi-tool", "oh-my-pi-tool")
    assert [c.key for c in created.criteria] == [
        "oh-my-pi-command-file-generation",
        "oh-my-pi-skill-file-generation",
        "oh-my-pi-tool-detection",
    ]
    assert created.body.startswith(
        "# oh-my-pi-tool Specification\n\n## Purpose\nTBD - created by change feat-add-omp-tool-support."
    )
    assert [c.key for c in omp.amends[0].criteria][-1] == "oh-my-pi-tool-supported-in-init"
    assert "oh-my-pi-tool" not in {spec.external_id for spec in parsed.specs}


def test_fission_archived_change_is_accepted_and_not_applied_again():
    parsed = openspec.parse(_tree("Fission-AI-OpenSpec"))
    merged = next(d for d in parsed.decisions if d.external_id == "merge-init-experimental")
    assert (merged.state, merged.date) == ("accepted", date(2026, 2, 17))
    assert merged.amends == []
    assert merged.extra["touched"] == ["cli-init", "legacy-cleanup"]
    assert merged.extra["tasks"] == {"total": 47, "done": 47}
    assert merged.source == Source(
        "openspec/changes/archive/2026-02-17-merge-init-experimental/proposal.md", 1
    )
    assert not any(task.decision == "merge-init-experimental" for task in parsed.tasks)


def test_fission_tasks_wait_for_the_group_before_them():
    parsed = openspec.parse(_tree("Fission-AI-OpenSpec"))
    tasks = {task.external_id: task for task in parsed.tasks}
    assert Counter(task.decision for task in parsed.tasks) == {
        "add-devin-desktop-support": 25,
        "feat-add-omp-tool-support": 13,
    }
    first_group = [f"feat-add-omp-tool-support/1.{n}" for n in range(1, 6)]
    assert tasks["feat-add-omp-tool-support/2.1"].depends_on == first_group
    assert tasks["feat-add-omp-tool-support/1.1"].depends_on == []
    last = tasks["feat-add-omp-tool-support/6.2"]
    assert (last.depends_on, last.extra) == (
        ["feat-add-omp-tool-support/5.1"],
        {"key": "6.2", "group": "6. Verification"},
    )
    assert all(task.state == "done" for task in parsed.tasks)
    assert len([n for n in parsed.notices if n.message.endswith("done without evidence")]) == 38


def test_flexyfield_duplicate_requirements_and_stale_modified_are_skips():
    parsed = openspec.parse(_tree("AuroraWebSoftware-FlexyField"))
    assert [len(spec.criteria) for spec in parsed.specs] == [9, 6, 6, 6, 10, 16, 4]
    skips = [(s.source.path.split("/")[-2], s.source.line) for s in parsed.skips]
    assert skips == FLEXYFIELD_SKIPS
    twice = "duplicate requirement 'Type Edge Cases' (key type-edge-cases, first at line 95)"
    assert parsed.skips[5].reason == twice
    stale = parsed.skips[6]
    assert stale.source.path.startswith("openspec/changes/add-relationship-field-type/specs/")
    missing = "MODIFIED 'Pivot View for Querying': query-integration has no such requirement"
    assert stale.reason == missing


def test_flexyfield_unnumbered_nested_tasks_get_group_positions():
    parsed = openspec.parse(_tree("AuroraWebSoftware-FlexyField"))
    tasks = [task for task in parsed.tasks if task.decision == "add-file-field-type"]
    keys = [task.extra["key"] for task in tasks]
    assert keys == ["1.1", "1.2", "1.3", "1.4", "1.5", "2.1", "3.1", "3.2", "3.3", "4.1", "4.2"]
    handler = tasks[2]
    assert (handler.title, handler.source.line, handler.extra["group"]) == (
        "Create `src/Services/FileHandler.php`",
        8,
        "Implementation",
    )
    assert (
        handler.description
        == "- [ ] Implement `upload`\n- [ ] Implement `delete`\n- [ ] Implement `getUrl`"
    )
    assert tasks[5].depends_on == [f"add-file-field-type/1.{n}" for n in range(1, 6)]


def test_flexyfield_dated_archive_keeps_date_touched_specs_and_task_counts():
    parsed = openspec.parse(_tree("AuroraWebSoftware-FlexyField"))
    refactor = next(d for d in parsed.decisions if d.state == "accepted")
    assert refactor.external_id == "refactor-fieldset-to-set-and-simplify-schema"
    assert (refactor.date, refactor.amends) == (date(2025, 11, 29), [])
    assert refactor.extra["tasks"] == {"total": 66, "done": 0}
    assert refactor.extra["touched"] == FLEXYFIELD_CAPABILITIES
    unchecked = next(n for n in parsed.notices if "unchecked" in n.message)
    folder = f"{FLEXYFIELD_ARCHIVE}/2025-11-29-refactor-fieldset-to-set-and-simplify-schema"
    assert unchecked.source == Source(f"{folder}/tasks.md", 2)
    assert unchecked.message == (
        "archived change refactor-fieldset-to-set-and-simplify-schema leaves 66 of 66 tasks "
        "unchecked; archived tasks are not imported"
    )


def test_flexyfield_undated_archive_keeps_its_folder_name():
    parsed = openspec.parse(_tree("AuroraWebSoftware-FlexyField"))
    hints = next(d for d in parsed.decisions if d.external_id == "add-ui-hints-support")
    assert (hints.state, hints.date, hints.title) == ("accepted", None, "Add UI Hints Support")
    assert hints.extra["touched"] == ["field-set-management"]
    proposal = Source(f"{FLEXYFIELD_ARCHIVE}/add-ui-hints-support/proposal.md", 1)
    assert Notice(proposal, "archived change add-ui-hints-support has no date") in parsed.notices
    assert [d.external_id for d in parsed.decisions if d.state == "proposed"] == [
        "add-file-field-type",
        "add-relationship-field-type",
        "add-simple-localization-support",
    ]


def test_delta_renames_removes_modifies_and_adds_in_archive_order():
    parsed = openspec.parse(_change(FULL_DELTA))
    amended = parsed.decisions[0].amends[0]
    assert [c.key for c in amended.criteria] == ["upload", "share-albums", "albums"]
    assert amended.criteria[0].text.split("\n")[2] == "The system SHALL accept uploads up to 20 MB."
    assert amended.criteria[1].source == Source("openspec/specs/photos/spec.md", 21)
    assert "### Requirement: Delete" not in amended.body
    assert "### Requirement: Share albums\nThe system MUST share albums.\n" in amended.body
    assert amended.body.endswith(
        "### Requirement: Albums\nThe system SHALL group photos into albums.\n\n"
        "## Notes\nKept as written.\n"
    )
    assert (parsed.skips, [s.external_id for s in parsed.specs]) == ([], ["photos"])


def test_delta_naming_a_missing_requirement_is_a_skip_with_its_line():
    parsed = openspec.parse(_change(MISSING_DELTA))
    path = "openspec/changes/add-albums/specs/photos/spec.md"
    assert parsed.skips == [
        Skip(Source(path, 7), "RENAMED 'Gone': photos has no such requirement"),
        Skip(Source(path, 5), "REMOVED 'Archive': photos has no such requirement"),
        Skip(
            Source(path, 2),
            "MODIFIED 'upload': photos has no such requirement (it has 'Upload')",
        ),
    ]
    amended = parsed.decisions[0].amends[0]
    assert [c.key for c in amended.criteria] == ["upload", "delete", "share"]
    assert amended.criteria[0].text.split("\n")[2] == "The system SHALL accept uploads."


def test_delta_on_an_unknown_capability_creates_it_from_added_only():
    delta = """
        ## ADDED Requirements
        ### Requirement: Tag photos
        The system SHALL let users tag photos.
        ## MODIFIED Requirements
        ### Requirement: Upload
        The system SHALL accept uploads.
        """
    parsed = openspec.parse(_change(delta, cap="tags"))
    created = parsed.decisions[0].amends[0]
    assert (created.external_id, [c.key for c in created.criteria]) == ("tags", ["tag-photos"])
    assert parsed.skips == [
        Skip(
            Source("openspec/changes/add-albums/specs/tags/spec.md", 5),
            "'Upload': tags has no current spec; only ADDED requirements can create it",
        )
    ]


def test_requirements_in_other_languages_and_without_shall_still_import():
    parsed = openspec.parse({"openspec/specs/security/spec.md": _md(FOREIGN_SPEC)})
    spec = parsed.specs[0]
    assert spec.title == "安全"
    assert [c.key for c in spec.criteria] == ["解封模板与密封一致", "optional-export"]
    assert spec.criteria[0].text.endswith("- **WHEN** 重启\n- **THEN** 解封成功")
    assert spec.criteria[1].text == "Optional export\n\nThe system MAY export photos."
    assert parsed.notices == [
        Notice(
            Source("openspec/specs/security/spec.md", 9),
            "requirement 'Optional export' says neither SHALL nor MUST",
        )
    ]


def test_wrapped_scenario_bullets_stay_in_the_criterion_text():
    parsed = openspec.parse({"openspec/specs/photos/spec.md": _md(WRAPPED_SPEC)})
    criterion = parsed.specs[0].criteria[0]
    assert criterion.text == (
        "Retry uploads\n\nThe system SHALL retry\nfailed uploads.\n\n"
        "#### Scenario: Network drops\n- **GIVEN** a slow network\n"
        "- **WHEN** an upload fails part way\n  through the file\n- **THEN** it retries"
    )
    assert criterion.source == Source("openspec/specs/photos/spec.md", 2)
    assert parsed.specs[0].title == "photos"
    assert parsed.notices == [
        Notice(
            Source("openspec/specs/photos/spec.md", 1), "no H1 title; the capability is the title"
        )
    ]


def test_long_requirement_names_get_stable_short_keys():
    name = "Migrating OpenSpec content out of a renamed tool's former directory"
    key = openspec.requirement_key(name)
    assert key == "migrating-openspec-conten-32af3a"
    assert len(key) == 32
    assert openspec.requirement_key(name) == key
    assert openspec.requirement_key("Upload") == "upload"
    assert openspec.requirement_key("!!!") == "requirement"


def test_change_tasks_numbered_or_not_and_unreadable_files():
    files = {
        "repo/openspec/changes/add-x/tasks.md": _md(CHANGE_TASKS),
        "repo/openspec/changes/add-x/proposal.md": b"\xff\xfe",
    }
    parsed = openspec.parse(files)
    assert [(t.external_id, t.state, t.depends_on) for t in parsed.tasks] == [
        ("add-x/1.1", "done", []),
        ("add-x/1.2", "ready", []),
        ("add-x/2.1", "cancelled", ["add-x/1.1", "add-x/1.2"]),
    ]
    reason = "not UTF-8 (at byte offset 0); the file was not read"
    assert parsed.skips == [Skip(Source("repo/openspec/changes/add-x/proposal.md", 1), reason)]
    assert (parsed.decisions[0].title, parsed.tasks[0].decision) == ("add-x", "add-x")
