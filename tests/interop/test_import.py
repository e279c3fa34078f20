"""Importing a team's files into a project, and exporting them back: the services."""

import io
import json
import zipfile
from pathlib import Path

import pytest

from decisions.models import Decision, Spec, SpecAmendment
from interop import services
from interop.models import ImportRun
from projects.errors import PermissionDenied, ServiceError
from projects.models import Event
from tasks import attempts
from tasks.models import Task
from tests.factories import Flow, ProjectFactory

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parents[1] / "fixtures" / "interop"


def zipped(folder: Path, under: str = "") -> bytes:
    """The folder as a team would upload it: a zip of its files (licences left out)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name not in ("LICENSE", "README.md"):
                archive.write(path, under + path.relative_to(folder).as_posix())
    return buffer.getvalue()


def upload(flow, format, data, name="upload.zip", dry_run=False, **kwargs):
    return services.import_upload(
        project=flow.project,
        actor=flow.manager,
        format=format,
        name=name,
        data=data,
        dry_run=dry_run,
        **kwargs,
    )


MADR = zipped(FIXTURES / "madr" / "elastisys-compliantkubernetes")
BEADS = (FIXTURES / "beads" / "steveyegge-beads" / ".beads" / "issues.jsonl").read_bytes()


def test_a_dry_run_reports_what_it_would_do_and_writes_nothing(flow):
    events = Event.objects.count()

    run = upload(flow, "madr", MADR, dry_run=True)

    assert run.state == "checked"
    assert run.report["counts"] == {"created": 57, "updated": 0, "unchanged": 0, "skipped": 0}
    assert Decision.objects.count() == 0
    assert Event.objects.count() == events


def test_applying_a_madr_folder_keeps_numbers_states_and_supersede_chains(flow):
    run = upload(flow, "madr", MADR)

    decisions = {d.number: d for d in Decision.objects.filter(project=flow.project)}
    assert run.state == "applied" and len(decisions) == 57
    assert (decisions[12].key, decisions[12].state) == (f"{flow.project.slug}-D12", "superseded")
    assert [d.number for d in decisions[17].supersedes.all()] == [12]
    assert decisions[17].origin == "madr:upload:docs/adr/0017"
    flow.project.refresh_from_db()
    assert flow.project.decision_seq == max(decisions)
    assert Event.objects.filter(transition="apply").count() == 1


def test_the_same_files_again_change_nothing(flow):
    upload(flow, "madr", MADR)
    upload(flow, "beads", BEADS, name="issues.jsonl")
    before = (Decision.objects.count(), Task.objects.count())

    again = upload(flow, "madr", MADR)
    beads_again = upload(flow, "beads", BEADS, name="issues.jsonl")

    assert again.report["counts"] == {"created": 0, "updated": 0, "unchanged": 57, "skipped": 0}
    assert beads_again.report["counts"]["created"] == 0
    assert beads_again.report["counts"]["updated"] == 0
    assert (Decision.objects.count(), Task.objects.count()) == before


def test_a_beads_file_becomes_tasks_with_their_dependencies_and_states(flow):
    run = upload(flow, "beads", BEADS, name="issues.jsonl")

    tasks = {t.metadata["id"]: t for t in Task.objects.filter(project=flow.project)}
    assert run.report["counts"]["created"] == len(tasks) == 527
    blocked_by = {
        (t.metadata["id"], d.metadata["id"]) for t in tasks.values() for d in t.depends_on.all()
    }
    wanted = {
        (issue_id, dep["depends_on_id"])
        for issue_id, t in tasks.items()
        for dep in json.loads(t.metadata["extra"]).get("dependencies") or []
        if dep.get("type") == "blocks"
        and dep["depends_on_id"] in tasks
        and dep["depends_on_id"] != issue_id
    }
    assert blocked_by == wanted
    assert {t.state for t in tasks.values() if t.metadata["source_status"] == "closed"} == {"done"}


def test_madr_export_then_import_into_an_empty_project_gives_the_same_decisions(flow):
    upload(flow, "madr", MADR)
    name, media_type, data = services.export(
        project=flow.project, actor=flow.manager, format="madr"
    )
    empty = Flow(ProjectFactory(slug="EM"))

    upload(empty, "madr", data, name=name)

    def shape(project):
        return sorted(
            (d.number, d.title, d.state, sorted(s.number for s in d.supersedes.all()))
            for d in Decision.objects.filter(project=project)
        )

    assert media_type == "application/zip"
    assert shape(empty.project) == shape(flow.project)


def test_beads_export_then_import_into_an_empty_project_gives_the_same_tasks(flow):
    upload(flow, "beads", BEADS, name="issues.jsonl")
    _, _, data = services.export(project=flow.project, actor=flow.manager, format="beads")
    empty = Flow(ProjectFactory(slug="EM"))

    upload(empty, "beads", data, name="issues.jsonl")

    def shape(project):
        return sorted(
            (
                t.metadata["id"],
                t.title,
                t.state,
                t.priority,
                sorted(label.name for label in t.labels.all()),
                sorted(d.metadata["id"] for d in t.depends_on.all()),
            )
            for t in Task.objects.filter(project=project)
        )

    assert shape(empty.project) == shape(flow.project)
    assert data == BEADS  # bd's own file comes back byte for byte


def test_a_speckit_feature_becomes_a_spec_and_its_tasks(flow):
    data = zipped(FIXTURES / "speckit" / "drillan-marketschema")

    run = upload(flow, "speckit", data)

    spec = Spec.objects.get(project=flow.project, origin="speckit:upload:003-http-client")
    version = spec.versions.get()
    keys = [c.key for c in version.criteria.all()]
    tasks = Task.objects.filter(project=flow.project, spec=spec)
    first = tasks.get(origin="speckit:upload:003-http-client/T001")
    assert run.report["counts"]["skipped"] == 0
    assert {"US1-AS1", "FR-001", "SC-001"} <= set(keys)
    assert {c.proof["check"] for c in version.criteria.all()} == {"review"}
    assert tasks.count() > 10
    assert json.loads(first.metadata["extra"])["key"] == "T001"
    assert tasks.filter(depends_on=first).exists()  # the next phase waits for this one


def test_a_changed_spec_file_becomes_a_new_proposed_version(flow):
    folder = {
        "specs/001-x/spec.md": b"# Feature Specification: X\n\n- **FR-001**: System MUST x.\n"
    }
    upload(flow, "speckit", archive(folder))
    folder["specs/001-x/spec.md"] += b"- **FR-002**: System MUST y.\n"

    run = upload(flow, "speckit", archive(folder))

    spec = Spec.objects.get(project=flow.project, origin="speckit:upload:001-x")
    assert [(v.number, v.state) for v in spec.versions.order_by("number")] == [
        (1, "accepted"),
        (2, "draft"),
    ]
    assert run.report["counts"]["updated"] == 1


def test_an_openspec_change_is_a_proposed_decision_amending_its_spec(flow):
    data = zipped(FIXTURES / "openspec" / "Fission-AI-OpenSpec")

    upload(flow, "openspec", data)

    change = Decision.objects.get(
        project=flow.project, origin="openspec:upload:add-devin-desktop-support"
    )
    archived = Decision.objects.filter(project=flow.project, state="accepted")
    assert change.state == "proposed"
    assert SpecAmendment.objects.filter(decision=change).exists()
    assert archived.exists()


def archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped_files:
        for name, content in files.items():
            zipped_files.writestr(name, content)
    return buffer.getvalue()


def test_only_managers_import_and_a_refusal_keeps_nothing(flow):
    with pytest.raises(PermissionDenied):
        services.import_upload(
            project=flow.project, actor=flow.reviewer, format="madr", name="a.zip", data=MADR
        )

    assert (ImportRun.objects.count(), Decision.objects.count()) == (0, 0)


def test_an_archive_that_escapes_its_folder_is_refused_and_nothing_is_kept(flow):
    data = archive({"../outside.md": b"# 0001 x\n"})

    with pytest.raises(ServiceError) as refused:
        upload(flow, "madr", data)

    assert refused.value.code == "unsafe_path"
    assert (ImportRun.objects.count(), Decision.objects.count()) == (0, 0)


def test_a_checked_import_is_applied_once(flow):
    run = upload(flow, "madr", MADR, dry_run=True)
    services.import_apply(run=run, actor=flow.manager)

    with pytest.raises(ServiceError) as refused:
        services.import_apply(run=run, actor=flow.manager)

    assert (refused.value.status, refused.value.code) == (409, "invalid_state")
    assert Decision.objects.count() == 57


def test_bad_lines_are_skipped_by_line_and_the_rest_is_imported_whole(flow):
    data = (
        b'{"id":"bd-1","title":"Good","status":"open"}\n'
        b'{"id":"bd-2","title":\n'
        b"\xff\xfe not utf-8\n"
        b'{"id":"bd-3","title":"Also good","status":"weird","dependencies":'
        b'[{"issue_id":"bd-3","depends_on_id":"bd-1","type":"blocks"}]}\n'
    )

    run = upload(flow, "beads", data, name="issues.jsonl")

    assert run.report["counts"] == {"created": 2, "updated": 0, "unchanged": 0, "skipped": 2}
    assert [s["source"] for s in run.report["skipped"]] == ["issues.jsonl:2", "issues.jsonl:3"]
    third = Task.objects.get(origin="beads:issues:bd-3")
    assert (third.state, [d.origin for d in third.depends_on.all()]) == (
        "draft",
        ["beads:issues:bd-1"],
    )
    assert any("unknown status 'weird'" in n["message"] for n in run.report["notices"])


def test_a_mapping_names_the_proof_of_a_speckit_criterion(flow):
    folder = {
        "specs/001-x/spec.md": b"# Feature Specification: X\n\n- **FR-001**: System MUST x.\n"
    }
    mapping = {"FR-001": {"check": "tests", "select": "tests/test_x.py::*"}}

    upload(flow, "speckit", archive(folder), mapping=mapping)

    criterion = Spec.objects.get(origin="speckit:upload:001-x").versions.get().criteria.get()
    assert (criterion.key, criterion.proof) == ("FR-001", mapping["FR-001"])


def test_open_questions_keep_the_first_version_proposed_and_are_reported(flow):
    spec_md = b"# Feature Specification: X\n\n- **FR-001**: System MUST log in via [NEEDS CLARIFICATION: which SSO?].\n"

    run = upload(flow, "speckit", archive({"specs/001-x/spec.md": spec_md}))

    spec = Spec.objects.get(origin="speckit:upload:001-x")
    assert spec.versions.get().state == "draft"
    assert run.report["items"][0]["note"] == "v1 kept proposed: 1 open question(s)"
    assert run.report["notices"][-1] == {
        "source": "specs/001-x/spec.md:3",
        "message": "needs clarification: which SSO?",
    }


def test_ten_thousand_issues_in_one_file_are_one_report(flow):
    lines = [
        json.dumps({"id": f"bd-{n}", "title": f"Issue {n}", "status": "open", "priority": n % 5})
        for n in range(10_000)
    ]

    run = upload(flow, "beads", ("\n".join(lines) + "\n").encode(), name="issues.jsonl")

    assert run.report["counts"]["created"] == 10_000
    assert Task.objects.filter(project=flow.project).count() == 10_000
    assert Task.objects.get(origin="beads:issues:bd-9999").key == f"{flow.project.slug}-10000"


def test_a_task_changed_in_the_file_takes_its_text_but_keeps_its_state_here(flow):
    upload(flow, "beads", b'{"id":"bd-1","title":"Old","status":"open"}\n', name="i.jsonl")

    run = upload(flow, "beads", b'{"id":"bd-1","title":"New","status":"closed"}\n', name="i.jsonl")

    task = Task.objects.get(origin="beads:i:bd-1")
    assert (task.title, task.state) == ("New", "ready")
    assert run.report["counts"]["updated"] == 1
    assert run.report["notices"][-1] == {
        "source": "i.jsonl:1",
        "message": f"{task.key} stays ready here; the file says done",
    }


def test_tasks_that_depend_on_each_other_are_imported_without_the_cycle(flow):
    tasks_md = (
        b"# Tasks\n\n## Phase 1: Setup\n\n"
        b"- [ ] T001 Write the model (depends on T002)\n"
        b"- [ ] T002 Write the view (depends on T001)\n"
    )

    run = upload(flow, "speckit", archive({"specs/001-x/tasks.md": tasks_md}))

    first, second = (Task.objects.get(origin=f"speckit:upload:001-x/T00{n}") for n in (1, 2))
    edges = [list(first.depends_on.all()), list(second.depends_on.all())]
    assert edges == [[second], []]
    assert any("dependency cycle" in n["message"] for n in run.report["notices"])


def test_a_file_cannot_close_a_task_an_agent_holds(flow):
    upload(flow, "beads", b'{"id":"bd-1","title":"Work","status":"open"}\n', name="i.jsonl")
    attempt = attempts.task_claim(agent=flow.agent, project=flow.project)

    run = upload(flow, "beads", b'{"id":"bd-1","title":"Work","status":"closed"}\n', name="i.jsonl")

    task = Task.objects.get(origin="beads:i:bd-1")
    assert (task.state, task.current_attempt_id) == ("claimed", attempt.pk)
    assert run.report["skipped"] == [
        {
            "source": "i.jsonl:1",
            "reason": f"{task.key} is claimed here; the file's changes are not applied",
        }
    ]


def test_a_file_cannot_decide_a_decision_that_is_proposed_here(flow):
    adr = b"# Use leases\n\n* Status: {status}\n\n## Context and Problem Statement\n\nWhy.\n"
    name = "docs/decisions/0001-use-leases.md"
    upload(flow, "madr", archive({name: adr.replace(b"{status}", b"proposed")}))

    run = upload(flow, "madr", archive({name: adr.replace(b"{status}", b"accepted")}))

    decision = Decision.objects.get(origin="madr:upload:docs/decisions/0001")
    assert (decision.state, decision.decided_by_id) == ("proposed", None)
    assert run.report["skipped"] == [
        {
            "source": f"{name}:1",
            "reason": f"{decision.key} (proposed) differs from the file in state; "
            "Factory Memory keeps its record (if the file is another log's, upload it under"
            " an origin name of its own, not upload)",
        }
    ]


def test_a_record_whose_metadata_passes_the_limit_is_skipped_and_named(flow, settings):
    settings.FACTORY_IMPORT_MAX_METADATA_BYTES = 2000
    big = {"id": "bd-2", "title": "Big", "status": "open", "x-blob": "x" * 5000}
    data = b'{"id":"bd-1","title":"Small","status":"open"}\n' + json.dumps(big).encode()

    run = upload(flow, "beads", data, name="issues.jsonl")

    assert run.report["skipped"] == [
        {"source": "issues.jsonl:2", "reason": "its metadata is 5258 bytes; the limit is 2000"}
    ]
    assert list(Task.objects.values_list("title", flat=True)) == ["Small"]


def test_a_decision_whose_metadata_passes_the_limit_is_skipped_and_named(flow, settings):
    settings.FACTORY_IMPORT_MAX_METADATA_BYTES = 2000
    appendix = "## Appendix\n\n" + "x" * 5000 + "\n"
    files = {"adr/0001-small.md": b"# Small\n", "adr/0002-big.md": f"# Big\n\n{appendix}".encode()}

    run = upload(flow, "madr", archive(files))

    assert run.report["skipped"] == [
        {"source": "adr/0002-big.md:1", "reason": "its metadata is 5166 bytes; the limit is 2000"}
    ]
    assert list(Decision.objects.values_list("title", flat=True)) == ["Small"]


def adr(title: str, status: str = "accepted") -> bytes:
    return f"# {title}\n\n* Status: {status}\n\n## Context and Problem Statement\n\nWhy.\n".encode()


def test_two_adr_logs_with_the_same_numbers_are_two_sets_of_decisions(flow):
    upload(flow, "madr", archive({"docs/adr/0013-use-kafka.md": adr("Use Kafka")}))

    run = upload(flow, "madr", archive({"services/x/adr/0013-use-grpc.md": adr("Use gRPC")}))

    assert run.report["counts"] == {"created": 1, "updated": 0, "unchanged": 0, "skipped": 0}
    assert sorted(Decision.objects.values_list("origin", "number", "title")) == [
        ("madr:upload:docs/adr/0013", 13, "Use Kafka"),
        ("madr:upload:services/x/adr/0013", 14, "Use gRPC"),
    ]
    assert run.report["items"][0]["note"] == "numbered 14: 13 was taken"


def test_a_monorepos_logs_in_one_upload_are_read_apart_and_again_unchanged(flow):
    data = archive(
        {
            "docs/adr/0013-use-kafka.md": adr("Use Kafka"),
            "services/x/adr/0012-use-rest.md": adr("Use REST", "superseded by ADR-0013"),
            "services/x/adr/0013-use-grpc.md": adr("Use gRPC"),
        }
    )
    first = upload(flow, "madr", data)

    again = upload(flow, "madr", data)

    assert first.report["counts"] == {"created": 3, "updated": 0, "unchanged": 0, "skipped": 0}
    assert again.report["counts"] == {"created": 0, "updated": 0, "unchanged": 3, "skipped": 0}
    grpc = Decision.objects.get(origin="madr:upload:services/x/adr/0013")
    assert [d.title for d in grpc.supersedes.all()] == ["Use REST"]
    assert Decision.objects.get(origin="madr:upload:docs/adr/0013").supersedes.count() == 0


# --- Several repositories' files in one project: the origin names the upload --------------


def test_two_repositories_adr_logs_in_the_same_folder_are_two_sets_of_decisions(flow):
    service_a = {
        "docs/decisions/0001-record-decisions.md": adr("Record decisions"),
        "docs/decisions/0013-use-kafka.md": adr("Use Kafka"),
    }
    service_b = {
        "docs/decisions/0001-record-decisions.md": adr("Record decisions"),
        "docs/decisions/0013-use-grpc.md": adr("Use gRPC"),
    }
    upload(flow, "madr", archive(service_a), name="service-a.zip")

    run = upload(flow, "madr", archive(service_b), name="service-b.zip")

    assert run.report["counts"] == {"created": 2, "updated": 0, "unchanged": 0, "skipped": 0}
    assert sorted(Decision.objects.values_list("origin", "number", "title")) == [
        ("madr:service-a:docs/decisions/0001", 1, "Record decisions"),
        ("madr:service-a:docs/decisions/0013", 13, "Use Kafka"),
        ("madr:service-b:docs/decisions/0001", 14, "Record decisions"),
        ("madr:service-b:docs/decisions/0013", 15, "Use gRPC"),
    ]


def test_each_repositorys_archive_imported_again_matches_only_what_it_made(flow):
    service_a = archive({"docs/decisions/0013-use-kafka.md": adr("Use Kafka")})
    service_b = archive({"docs/decisions/0013-use-grpc.md": adr("Use gRPC")})
    upload(flow, "madr", service_a, name="service-a.zip")
    upload(flow, "madr", service_b, name="service-b.zip")

    again = [upload(flow, "madr", service_a, name="service-a.zip")]
    again.append(upload(flow, "madr", service_b, name="service-b.zip"))

    unchanged = {"created": 0, "updated": 0, "unchanged": 1, "skipped": 0}
    assert [run.report["counts"] for run in again] == [unchanged, unchanged]
    assert Decision.objects.count() == 2


SPECKIT_REPOSITORY = {
    "specs/001-login/spec.md": b"# Feature Specification: {title}\n\n- **FR-001**: System MUST {title}.\n",
    "specs/001-login/tasks.md": b"# Tasks\n\n## Phase 1: Setup\n\n- [ ] T001 Build {title}\n",
}
OPENSPEC_REPOSITORY = {
    "openspec/specs/auth/spec.md": b"# Auth Specification\n\n## Requirements\n"
    b"### Requirement: {title}\nThe system SHALL {title}.\n",
    "openspec/changes/add-2fa/proposal.md": b"# Change: {title}\n\n## Why\nBecause.\n\n"
    b"## What Changes\n- {title}\n",
    "openspec/changes/add-2fa/tasks.md": b"## 1. Build\n- [ ] 1.1 Build {title}\n",
}


def repository(files: dict[str, bytes], title: str) -> bytes:
    return archive({path: text.replace(b"{title}", title.encode()) for path, text in files.items()})


@pytest.mark.parametrize(
    ("format", "files", "origins"),
    [
        ("speckit", SPECKIT_REPOSITORY, ["speckit:{}:001-login", "speckit:{}:001-login/T001"]),
        (
            "openspec",
            OPENSPEC_REPOSITORY,
            ["openspec:{}:auth", "openspec:{}:add-2fa", "openspec:{}:add-2fa/1.1"],
        ),
    ],
)
def test_two_repositories_specs_with_the_same_names_stay_apart_and_again_unchanged(
    flow, format, files, origins
):
    service_a, service_b = repository(files, "sign in"), repository(files, "search")
    upload(flow, format, service_a, name="service-a.zip")

    run = upload(flow, format, service_b, name="service-b.zip")
    again = upload(flow, format, service_a, name="service-a.zip")

    made = len(origins)
    assert run.report["counts"] == {"created": made, "updated": 0, "unchanged": 0, "skipped": 0}
    assert again.report["counts"] == {"created": 0, "updated": 0, "unchanged": made, "skipped": 0}
    stored = [
        *Spec.objects.values_list("origin", flat=True),
        *Decision.objects.values_list("origin", flat=True),
        *Task.objects.values_list("origin", flat=True),
    ]
    wanted = [o.format(name) for name in ("service-a", "service-b") for o in origins]
    assert sorted(stored) == sorted(wanted)


def test_two_beads_files_with_the_same_ids_are_told_apart_by_the_name_given(flow):
    line = b'{"id":"api-1","title":"%s","status":"open"}\n'
    upload(flow, "beads", line % b"Rate limits", name="issues.jsonl", origin_name="service-a")

    run = upload(flow, "beads", line % b"Retries", name="issues.jsonl", origin_name="service-b")

    assert run.report["counts"] == {"created": 1, "updated": 0, "unchanged": 0, "skipped": 0}
    assert sorted(Task.objects.values_list("origin", "title")) == [
        ("beads:service-a:api-1", "Rate limits"),
        ("beads:service-b:api-1", "Retries"),
    ]


def test_the_same_log_under_another_name_is_created_again_and_the_report_says_whose_ids(flow):
    log = {
        "docs/decisions/0001-record-decisions.md": adr("Record decisions"),
        "docs/decisions/0013-use-kafka.md": adr("Use Kafka"),
    }
    upload(flow, "madr", archive(log), name="service-a.zip")

    run = upload(flow, "madr", archive(log), name="service-a (1).zip", dry_run=True)

    assert (run.origin_name, run.report["counts"]["created"]) == ("service-a-1", 2)
    assert run.report["notices"][-1] == {
        "source": "docs/decisions/0001-record-decisions.md:1",
        "message": "2 of the records created have the ids of records imported under another"
        " origin name: service-a (2). Files from another repository are rightly kept apart;"
        " the same files again are taken twice unless uploaded under the name they had"
        " (origin_name).",
    }


def test_a_log_imported_again_under_its_name_has_no_note_of_other_names(flow):
    log = archive({"docs/decisions/0013-use-kafka.md": adr("Use Kafka")})
    upload(flow, "madr", log, name="service-a.zip")
    upload(
        flow,
        "madr",
        archive({"docs/decisions/0013-use-grpc.md": adr("Use gRPC")}),
        name="service-b.zip",
    )

    run = upload(flow, "madr", log, name="service-a.zip")

    assert run.report["counts"]["unchanged"] == 1
    assert run.report["notices"] == []
