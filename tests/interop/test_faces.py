"""The faces of interop: the API, the import page and manage.py, each a dry run by default."""

import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from decisions.models import Decision, Spec
from interop.models import ImportRun
from projects.models import Event
from tests.interop.test_import import FIXTURES, MADR, archive

pytestmark = pytest.mark.django_db

ADR = b"# Use PostgreSQL\n\n* Status: accepted\n* Date: 2024-03-01\n\n## Context and Problem Statement\n\nWe need a database.\n"


def test_the_api_checks_by_default_and_applies_on_request(flow, api):
    client = api(flow.manager)
    url = f"/api/v1/projects/{flow.project.slug}/imports/"
    files = {"docs/decisions/0007-use-postgresql.md": ADR}

    checked = client.post(
        url, {"format": "madr", "file": SimpleUploadedFile("a.zip", archive(files))}
    )
    applied = client.post(f"{url}{checked.json()['id']}/apply/")

    assert (checked.status_code, checked.json()["state"]) == (200, "checked")
    assert checked.json()["report"]["items"] == [
        {
            "kind": "decision",
            "origin": "madr:a:docs/decisions/0007",
            "key": f"{flow.project.slug}-D7",
            "action": "created",
            "source": "docs/decisions/0007-use-postgresql.md:1",
        }
    ]
    assert (applied.status_code, applied.json()["state"]) == (200, "applied")
    assert Decision.objects.get(origin="madr:a:docs/decisions/0007").state == "accepted"


def test_the_api_refuses_a_member_who_does_not_manage_and_keeps_nothing(flow, api):
    answer = api(flow.reviewer).post(
        f"/api/v1/projects/{flow.project.slug}/imports/",
        {"format": "madr", "file": SimpleUploadedFile("a.zip", MADR), "dry_run": "false"},
    )

    assert (answer.status_code, answer.json()["code"]) == (403, "permission_denied")
    assert (ImportRun.objects.count(), Decision.objects.count()) == (0, 0)


def test_another_projects_imports_are_not_found(flow, other_flow, api):
    run = (
        api(other_flow.manager)
        .post(
            f"/api/v1/projects/{other_flow.project.slug}/imports/",
            {"format": "madr", "file": SimpleUploadedFile("a.zip", MADR)},
        )
        .json()
    )

    answer = api(flow.manager).post(
        f"/api/v1/projects/{other_flow.project.slug}/imports/{run['id']}/apply/"
    )

    assert answer.status_code == 404
    assert ImportRun.objects.get(pk=run["id"]).state == "checked"


@pytest.mark.parametrize(
    ("files", "status", "code"),
    [
        ({"../../etc/x.md": b"x"}, 400, "unsafe_path"),
        ({"/abs/0001-x.md": b"x"}, 400, "unsafe_path"),
    ],
)
def test_a_hostile_archive_is_refused_with_its_code(flow, api, files, status, code):
    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/",
        {"format": "madr", "file": SimpleUploadedFile("a.zip", archive(files))},
    )

    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert ImportRun.objects.count() == 0


def test_a_zip_bomb_is_refused_before_it_expands(flow, api, settings):
    settings.FACTORY_IMPORT_MAX_EXPANDED_BYTES = 1024 * 1024
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("docs/decisions/0001-bomb.md", b"0" * (50 * 1024 * 1024))

    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/",
        {"format": "madr", "file": SimpleUploadedFile("bomb.zip", buffer.getvalue())},
    )

    assert (answer.status_code, answer.json()["code"]) == (413, "too_large_expanded")
    assert ImportRun.objects.count() == 0


def test_the_export_api_gives_a_madr_zip_to_members(flow, api):
    call_command(
        "import",
        "madr",
        str(FIXTURES / "madr" / "adr-madr"),
        project=flow.project.slug,
        username=flow.manager.username,
        apply=True,
        stdout=io.StringIO(),
    )

    answer = api(flow.agent).get(f"/api/v1/projects/{flow.project.slug}/exports/madr/")

    names = zipfile.ZipFile(io.BytesIO(answer.content)).namelist()
    assert answer.status_code == 200
    assert (
        answer["Content-Disposition"] == f'attachment; filename="{flow.project.slug}-decisions.zip"'
    )
    assert names[0] == "docs/decisions/0001-dual-license-the-work.md"
    assert len(names) == Decision.objects.filter(project=flow.project).count()


def test_manage_py_import_is_a_dry_run_unless_told_to_apply(flow, tmp_path):
    out = io.StringIO()
    path = str(FIXTURES / "madr" / "adr-madr")

    call_command(
        "import",
        "madr",
        path,
        project=flow.project.slug,
        username=flow.manager.username,
        stdout=out,
    )
    dry = Decision.objects.count()
    call_command(
        "import",
        "madr",
        path,
        project=flow.project.slug,
        username=flow.manager.username,
        apply=True,
        json=True,
        stdout=(report := io.StringIO()),
    )

    assert "dry run (nothing written; --apply to write)" in out.getvalue()
    assert dry == 0
    assert json.loads(report.getvalue())["counts"]["created"] == Decision.objects.count() > 0
    assert Event.objects.filter(transition="apply").count() == 1


def test_the_page_checks_an_upload_shows_the_report_and_applies_it(flow, client):
    client.force_login(flow.manager)
    files = {"docs/decisions/0007-use-postgresql.md": ADR}

    checked = client.post(
        f"/projects/{flow.project.slug}/imports/",
        {"format": "madr", "file": SimpleUploadedFile("adrs.zip", archive(files))},
    )
    report = client.get(checked["Location"]).content.decode()
    applied = client.post(checked["Location"] + "apply/", follow=True).content.decode()

    assert "What applying it will do" in report and 'id="apply"' in report
    assert "docs/decisions/0007-use-postgresql.md:1" in report
    assert "applied: 1 created, 0 updated, 0 unchanged, 0 skipped." in applied
    assert Decision.objects.filter(project=flow.project).count() == 1


def test_the_page_is_for_managers_only(flow, client):
    client.force_login(flow.reviewer)

    answer = client.get(f"/projects/{flow.project.slug}/imports/")

    assert answer.status_code == 404


def test_an_imported_task_says_where_it_came_from(flow, client, tmp_path):
    issues = tmp_path / "issues.jsonl"
    issues.write_bytes(b'{"id":"bd-7","title":"Old work","status":"closed","priority":1}\n')
    call_command(
        "import",
        "beads",
        str(issues),
        project=flow.project.slug,
        username=flow.manager.username,
        apply=True,
        stdout=io.StringIO(),
    )
    client.force_login(flow.reviewer)

    page = client.get(f"/tasks/{flow.project.slug}-1/").content.decode()

    assert (
        'imported from <span class="mono">beads:issues:bd-7</span> (done there, without evidence here)'
        in page
    )


def test_an_upload_over_the_limit_is_refused_before_it_is_read_in_both_faces(
    flow, api, client, settings
):
    settings.FACTORY_IMPORT_MAX_BYTES = 100
    big = SimpleUploadedFile("issues.jsonl", b"x" * 101)
    client.force_login(flow.manager)

    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/", {"format": "beads", "file": big}
    )
    page = client.post(
        f"/projects/{flow.project.slug}/imports/",
        {"format": "beads", "file": SimpleUploadedFile("issues.jsonl", b"x" * 101)},
    )

    assert (answer.status_code, answer.json()["code"]) == (413, "too_large")
    assert answer.json()["detail"] == "file: the upload is 101 bytes; the limit is 100"
    assert page.status_code == 400
    assert "file: the upload is 101 bytes; the limit is 100" in page.content.decode()
    assert ImportRun.objects.count() == 0


SPEC_MD = b"# Feature Specification: X\n\n- **FR-001**: System MUST x.\n"
PROOF = {"FR-001": {"check": "tests", "select": "tests/test_x.py::*"}}


def multipart(*parts: tuple[str, str | None, str | None, bytes]) -> tuple[bytes, str]:
    """A form of (name, filename, content type, bytes) parts, as a generic client sends it."""
    lines = []
    for name, filename, content_type, content in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        head = f"--b0\r\nContent-Disposition: {disposition}\r\n"
        head += f"Content-Type: {content_type}\r\n" if content_type else ""
        lines.append(head.encode() + b"\r\n" + content + b"\r\n")
    return b"".join(lines) + b"--b0--\r\n", "multipart/form-data; boundary=b0"


def test_the_schema_describes_the_mapping_as_the_json_object_the_server_reads(api, flow):
    schema = api(flow.manager).get("/api/schema/?format=json").json()

    field = schema["components"]["schemas"]["ImportListInputRequest"]["properties"]["mapping"]

    assert (field["type"], field["additionalProperties"]) == ("object", {})


def test_a_mapping_sent_as_a_json_part_names_the_proof_of_a_criterion(api, flow):
    body, content_type = multipart(
        ("file", "s.zip", "application/zip", archive({"specs/001-x/spec.md": SPEC_MD})),
        ("format", None, None, b"speckit"),
        ("dry_run", None, None, b"false"),
        ("mapping", None, "application/json", json.dumps(PROOF).encode()),
    )

    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/", body, content_type=content_type
    )

    assert answer.status_code == 201
    spec = Spec.objects.get(project=flow.project, origin="speckit:s:001-x")
    assert spec.versions.get().criteria.get().proof == PROOF["FR-001"]


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ("{not json", "not JSON: Expecting property name enclosed in double quotes"),
        ("[1, 2]", "a JSON object of criterion keys to proofs"),
    ],
)
def test_a_mapping_that_is_not_a_json_object_is_refused_and_nothing_kept(
    api, flow, mapping, message
):
    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/",
        {"format": "speckit", "mapping": mapping, "file": SimpleUploadedFile("s.zip", b"PK")},
    )

    assert (answer.status_code, answer.json()["code"]) == (400, "invalid")
    assert answer.json()["fields"]["mapping"][0].startswith(message)
    assert ImportRun.objects.count() == 0


def test_the_api_takes_an_origin_name_and_answers_the_one_it_used(flow, api):
    url = f"/api/v1/projects/{flow.project.slug}/imports/"
    files = {"docs/decisions/0007-use-postgresql.md": ADR}

    named = api(flow.manager).post(
        url,
        {
            "format": "madr",
            "origin_name": "svc_a.v2",
            "file": SimpleUploadedFile("a.zip", archive(files)),
        },
    )
    unnamed = api(flow.manager).post(
        url, {"format": "madr", "file": SimpleUploadedFile("Service A (2).zip", archive(files))}
    )

    assert (named.status_code, named.json()["origin_name"]) == (200, "svc_a.v2")
    assert named.json()["report"]["items"][0]["origin"] == "madr:svc_a.v2:docs/decisions/0007"
    assert (unnamed.status_code, unnamed.json()["origin_name"]) == (200, "Service-A-2")


RULE = "1 to 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or a digit"


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        ("a/b", [RULE]),
        ("../x", [RULE]),
        ("a:b", [RULE]),
        ("a b", [RULE]),
        ("-lead", [RULE]),
        (".hidden", [RULE]),
        ("naïve", [RULE]),
        ("x" * 65, ["Ensure this field has no more than 64 characters.", RULE]),
        ("", ["This field may not be blank."]),
    ],
)
def test_a_bad_origin_name_is_refused_naming_the_field_and_nothing_is_kept(
    flow, api, name, messages
):
    files = {"docs/decisions/0007-use-postgresql.md": ADR}

    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/",
        {
            "format": "madr",
            "origin_name": name,
            "dry_run": "false",
            "file": SimpleUploadedFile("a.zip", archive(files)),
        },
    )

    assert (answer.status_code, answer.json()["code"]) == (400, "invalid")
    assert answer.json()["fields"] == {"origin_name": messages}
    assert (ImportRun.objects.count(), Decision.objects.count()) == (0, 0)


def test_the_schema_states_what_an_origin_name_may_be(api, flow):
    schema = api(flow.manager).get("/api/schema/?format=json").json()

    field = schema["components"]["schemas"]["ImportListInputRequest"]["properties"]["origin_name"]

    assert (field["pattern"], field["maxLength"]) == ("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", 64)
    assert "origin_name" not in schema["components"]["schemas"]["ImportListInputRequest"].get(
        "required", []
    )


def test_manage_py_import_takes_an_origin_name(flow):
    path = str(FIXTURES / "madr" / "adr-madr")

    call_command(
        "import",
        "madr",
        path,
        project=flow.project.slug,
        username=flow.manager.username,
        origin_name="adr-tools",
        apply=True,
        stdout=(out := io.StringIO()),
    )

    origins = set(Decision.objects.values_list("origin", flat=True))
    run = ImportRun.objects.get()
    assert out.getvalue().startswith(
        f"Import #{run.pk} of adr-madr.zip (madr, origin name adr-tools)"
    )
    assert len(origins) == 19
    assert {origin.rsplit(":", 1)[0] for origin in origins} == {"madr:adr-tools"}


def test_the_page_takes_an_origin_name_and_refuses_a_bad_one_keeping_nothing(flow, client):
    client.force_login(flow.manager)
    files = {"docs/decisions/0007-use-postgresql.md": ADR}
    url = f"/projects/{flow.project.slug}/imports/"

    refused = client.post(
        url,
        {
            "format": "madr",
            "origin_name": "a/b",
            "file": SimpleUploadedFile("a.zip", archive(files)),
        },
    )
    nothing = ImportRun.objects.count()
    checked = client.post(
        url,
        {
            "format": "madr",
            "origin_name": "svc-a",
            "file": SimpleUploadedFile("a.zip", archive(files)),
        },
    )

    assert refused.status_code == 400
    assert RULE.replace("'", "&#x27;") in refused.content.decode()
    assert nothing == 0
    assert (
        ImportRun.objects.get(pk=checked["Location"].rstrip("/").rsplit("/", 1)[1]).report["items"][
            0
        ]["origin"]
        == "madr:svc-a:docs/decisions/0007"
    )


def test_manage_py_refuses_a_bad_origin_name_naming_it_and_keeps_nothing(flow):
    with pytest.raises(CommandError) as refused:
        call_command(
            "import",
            "madr",
            str(FIXTURES / "madr" / "adr-madr"),
            project=flow.project.slug,
            username=flow.manager.username,
            origin_name="../adr",
            apply=True,
            stdout=io.StringIO(),
        )

    assert str(refused.value) == f"origin_name: {RULE}"
    assert (ImportRun.objects.count(), Decision.objects.count()) == (0, 0)


BEADS_LINE = b'{"id": "bd-1", "title": "Claim tasks", "status": "open"}\n'


def test_a_file_named_for_no_kind_is_read_as_the_media_type_its_part_declares(api, flow):
    body, content_type = multipart(
        ("file", "file", "application/x-ndjson", BEADS_LINE),
        ("format", None, None, b"beads"),
    )

    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/", body, content_type=content_type
    )

    assert (answer.status_code, answer.json()["name"]) == (200, "file.jsonl")
    assert answer.json()["report"]["counts"]["created"] == 1


def test_a_file_whose_content_name_and_media_type_say_no_kind_is_refused(api, flow):
    body, content_type = multipart(
        ("file", "file", "application/octet-stream", BEADS_LINE),
        ("format", None, None, b"beads"),
    )

    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/", body, content_type=content_type
    )

    assert (answer.status_code, answer.json()["code"]) == (400, "unsupported_upload")
    assert ImportRun.objects.count() == 0


def test_the_schema_lists_the_media_types_an_import_takes_and_a_file_is_not_empty(api, flow):
    schema = api(flow.manager).get("/api/schema/?format=json").json()

    body = schema["paths"]["/api/v1/projects/{slug}/imports/"]["post"]["requestBody"]
    form = body["content"]["multipart/form-data"]
    fields = schema["components"]["schemas"]["ImportListInputRequest"]["properties"]

    assert form["encoding"]["file"]["contentType"].split(", ") == [
        "application/zip",
        "application/x-tar",
        "application/gzip",
        "application/x-bzip2",
        "application/x-xz",
        "application/x-ndjson",
        "application/json",
        "text/markdown",
        "application/yaml",
        "text/plain",
    ]
    assert (fields["file"]["format"], fields["file"]["minLength"]) == ("binary", 1)


def test_a_mapping_holding_a_nul_is_refused_naming_it_and_nothing_kept(api, flow):
    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/",
        {
            "format": "speckit",
            "mapping": json.dumps({"FR-001\x00": {"check": "review"}}),
            "file": SimpleUploadedFile("s.zip", archive({"specs/001-x/spec.md": SPEC_MD})),
        },
    )

    assert (answer.status_code, answer.json()["fields"]) == (
        400,
        {"mapping": ["text may not contain NUL characters"]},
    )
    assert ImportRun.objects.count() == 0
