"""Evidence upload and download through the API."""

import hashlib
import os

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from evidence.models import Evidence
from tests.factories import expire_lease

JUNIT = b"<testsuite name='s' tests='2'><testcase classname='tests.test_a' name='test_one'/><testcase classname='tests.test_a' name='test_two'/></testsuite>"
BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<testsuite>&lol3;</testsuite>"""


def upload(client, attempt, content, kind="junit", name="report.xml", **extra):
    data = {
        "file": SimpleUploadedFile(name, content, content_type="application/xml"),
        "kind": kind,
        **extra,
    }
    return client.post(f"/api/v1/attempts/{attempt.pk}/evidence/", data, format="multipart")


def files_under(path):
    return [os.path.join(d, f) for d, _, names in os.walk(path) for f in names]


@pytest.mark.django_db
def test_the_lease_holder_uploads_agent_evidence_hashed_while_streaming(flow, api):
    _, attempt = flow.claimed(spec=flow.spec())

    response = upload(api(flow.agent), attempt, JUNIT, criteria="AC-1, AC-3")

    assert response.status_code == 201
    body = response.json()
    assert body["sha256"] == hashlib.sha256(JUNIT).hexdigest()
    assert (body["size"], body["kind"], body["provenance"], body["authoritative"]) == (
        len(JUNIT),
        "junit",
        "agent",
        False,
    )
    assert body["criteria"] == ["AC-1", "AC-3"]
    assert (body["summary"]["tests"], body["summary"]["passed"]) == (2, 2)


@pytest.mark.django_db
def test_criteria_may_be_repeated_fields(flow, api):
    _, attempt = flow.claimed(spec=flow.spec())
    client = api(flow.agent)

    response = client.post(
        f"/api/v1/attempts/{attempt.pk}/evidence/",
        {"file": SimpleUploadedFile("r.xml", JUNIT), "kind": "junit", "criteria": ["AC-1", "AC-2"]},
        format="multipart",
    )

    assert response.json()["criteria"] == ["AC-1", "AC-2"]


@pytest.mark.django_db
def test_a_verifier_uploads_authoritative_evidence(flow, api):
    _, attempt = flow.claimed()

    body = upload(api(flow.verifier), attempt, JUNIT).json()

    assert (body["provenance"], body["authoritative"]) == ("verifier", True)


@pytest.mark.django_db
def test_provenance_in_the_request_body_is_refused(flow, api):
    _, attempt = flow.claimed()

    response = upload(api(flow.agent), attempt, JUNIT, provenance="verifier", authoritative="true")

    assert (response.status_code, response.json()["code"]) == (400, "invalid")
    assert response.json()["fields"] == {
        "authoritative": ["read-only field"],
        "provenance": ["read-only field"],
    }
    assert Evidence.objects.count() == 0


@pytest.mark.django_db
def test_an_xml_bomb_is_400_and_nothing_is_stored(flow, api, settings):
    _, attempt = flow.claimed()

    response = upload(api(flow.agent), attempt, BOMB)

    assert response.status_code == 400
    assert "DTD" in response.json()["detail"]
    assert Evidence.objects.count() == 0
    assert files_under(settings.MEDIA_ROOT) == []
    assert files_under(settings.FACTORY_UPLOAD_TEMP_DIR) == []


@pytest.mark.django_db
def test_a_file_that_is_not_its_declared_kind_is_400(flow, api):
    _, attempt = flow.claimed()

    response = upload(api(flow.agent), attempt, b"just words", kind="junit")

    assert (response.status_code, response.json()["code"]) == (400, "invalid")
    assert "not well-formed XML" in response.json()["detail"]
    assert Evidence.objects.count() == 0


@pytest.mark.django_db
def test_an_unknown_kind_is_400_naming_the_field(flow, api):
    _, attempt = flow.claimed()

    response = upload(api(flow.agent), attempt, JUNIT, kind="video")

    assert (response.status_code, list(response.json()["fields"])) == (400, ["kind"])


@pytest.mark.django_db
def test_a_file_over_the_limit_is_413_and_leaves_no_file(flow, api, settings):
    settings.FACTORY_MAX_UPLOAD_BYTES = 1000
    _, attempt = flow.claimed()

    response = upload(api(flow.agent), attempt, b"x" * 5000, kind="log", name="big.log")

    assert (response.status_code, response.json()["code"]) == (413, "too_large")
    assert Evidence.objects.count() == 0
    assert files_under(settings.MEDIA_ROOT) == []
    assert files_under(settings.FACTORY_UPLOAD_TEMP_DIR) == []


@pytest.mark.django_db
def test_a_declared_length_over_the_limit_is_refused_before_reading(flow, api, settings):
    settings.FACTORY_MAX_UPLOAD_BYTES = 1000
    _, attempt = flow.claimed()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/evidence/",
        data=b"--x--",
        content_type="multipart/form-data; boundary=x",
        CONTENT_LENGTH=str(50 * 1024 * 1024),
    )

    assert (response.status_code, response.json()["code"]) == (413, "too_large")


@pytest.mark.django_db
def test_a_lost_lease_cannot_upload(flow, api, settings):
    _, attempt = flow.claimed()
    expire_lease(attempt)

    response = upload(api(flow.agent), attempt, JUNIT)

    assert (response.status_code, response.json()["code"]) == (409, "lease_lost")
    assert Evidence.objects.count() == 0
    assert files_under(settings.MEDIA_ROOT) == []


@pytest.mark.django_db
def test_a_reviewer_of_another_project_gets_404(flow, other_flow, api):
    _, attempt = flow.claimed()

    response = upload(api(other_flow.verifier), attempt, JUNIT)

    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert Evidence.objects.count() == 0


@pytest.mark.django_db
def test_content_streams_back_with_its_sha256(flow, api):
    _, attempt = flow.claimed()
    evidence_id = upload(api(flow.agent), attempt, JUNIT).json()["id"]

    response = api(flow.reviewer).get(f"/api/v1/evidence/{evidence_id}/content/")

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == JUNIT
    assert response["X-Content-SHA256"] == hashlib.sha256(JUNIT).hexdigest()
    assert response["Content-Disposition"] == 'attachment; filename="report.xml"'


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=10-19", 10, 19),
        ("bytes=120-", 120, len(JUNIT) - 1),
        ("bytes=-5", len(JUNIT) - 5, len(JUNIT) - 1),
        ("bytes=100-99999", 100, len(JUNIT) - 1),
    ],
)
@pytest.mark.django_db
def test_content_answers_one_range_with_206_and_those_bytes(flow, api, header, first, last):
    _, attempt = flow.claimed()
    evidence_id = upload(api(flow.agent), attempt, JUNIT).json()["id"]

    response = api(flow.reviewer).get(f"/api/v1/evidence/{evidence_id}/content/", HTTP_RANGE=header)

    assert response.status_code == 206
    assert b"".join(response.streaming_content) == JUNIT[first : last + 1]
    assert response["Content-Range"] == f"bytes {first}-{last}/{len(JUNIT)}"
    assert response["Content-Length"] == str(last - first + 1)
    assert response["X-Content-SHA256"] == hashlib.sha256(JUNIT).hexdigest()
    assert response["Content-Disposition"] == 'attachment; filename="report.xml"'
    assert response["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_RANGE": "bytes=0-1,5-6"},
        {"HTTP_RANGE": "items=0-1"},
        {"HTTP_RANGE": "bytes=9-2"},
        {"HTTP_RANGE": "bytes=1e2-"},
        {"HTTP_RANGE": "bytes=0-1", "HTTP_IF_RANGE": '"another-etag"'},
    ],
    ids=["several-ranges", "other-unit", "backwards", "not-digits", "if-range-mismatch"],
)
@pytest.mark.django_db
def test_content_ignores_a_range_it_does_not_serve_and_sends_the_whole_file(flow, api, headers):
    _, attempt = flow.claimed()
    evidence_id = upload(api(flow.agent), attempt, JUNIT).json()["id"]

    response = api(flow.reviewer).get(f"/api/v1/evidence/{evidence_id}/content/", **headers)

    assert (response.status_code, response["Accept-Ranges"]) == (200, "bytes")
    assert b"".join(response.streaming_content) == JUNIT
    assert not response.has_header("Content-Range")


@pytest.mark.parametrize("header", ["bytes=99999-", "bytes=-0"])
@pytest.mark.django_db
def test_content_range_outside_the_file_is_416(flow, api, header):
    _, attempt = flow.claimed()
    evidence_id = upload(api(flow.agent), attempt, JUNIT).json()["id"]

    response = api(flow.reviewer).get(f"/api/v1/evidence/{evidence_id}/content/", HTTP_RANGE=header)

    assert response.status_code == 416
    assert response.json()["code"] == "range_not_satisfiable"
    assert response["Content-Range"] == f"bytes */{len(JUNIT)}"


@pytest.mark.django_db
def test_same_bytes_uploaded_twice_are_stored_once(flow, api, settings):
    _, attempt = flow.claimed()
    client = api(flow.agent)

    first = upload(client, attempt, JUNIT).json()
    second = upload(client, attempt, JUNIT, name="again.xml").json()

    assert first["sha256"] == second["sha256"]
    assert first["id"] != second["id"]
    assert len(files_under(os.path.join(settings.MEDIA_ROOT, "evidence"))) == 1


@pytest.mark.django_db
def test_the_attempts_evidence_is_listed(flow, api):
    _, attempt = flow.claimed()
    upload(api(flow.agent), attempt, JUNIT)

    body = api(flow.manager).get(f"/api/v1/attempts/{attempt.pk}/evidence/").json()

    assert [(e["kind"], e["name"]) for e in body] == [("junit", "report.xml")]


@pytest.mark.django_db
def test_a_log_is_counted_while_it_streams_in(flow, api):
    _, attempt = flow.claimed()

    body = upload(api(flow.agent), attempt, b"one\ntwo\nthree", kind="log", name="run.log").json()

    assert (body["kind"], body["summary"]) == ("log", {"lines": 3})


@pytest.mark.django_db
def test_a_log_with_nul_bytes_is_400_and_leaves_nothing(flow, api, settings):
    _, attempt = flow.claimed()

    response = upload(api(flow.agent), attempt, b"text\x00binary\n", kind="log", name="run.log")

    assert (response.status_code, response.json()["detail"]) == (
        400,
        "file: a log must be text; this file has NUL bytes",
    )
    assert Evidence.objects.count() == 0
    assert files_under(settings.MEDIA_ROOT) == []
    assert files_under(settings.FACTORY_UPLOAD_TEMP_DIR) == []
