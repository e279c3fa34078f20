"""The review UI's evidence pages: each kind's viewer, images served sandboxed and by range,
files over the inline limit, and another project's evidence."""

import pytest

from demo.artifacts import git_diff, screenshot
from evidence import storage
from tests.tasks.pages import JUNIT_PASSED, html

# --- Evidence --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_evidence_page_renders_its_viewer(client, flow):
    _, attempt = flow.claimed()
    log = flow.attach(attempt, b"\x1b[32mok\x1b[0m\n", name="run.log")
    client.force_login(flow.reviewer)

    response = client.get(f"/evidence/{log.pk}/")

    assert response.status_code == 200
    assert '<pre class="log"><span class="ansi-32">ok</span></pre>' in html(response)
    assert f"sha256 {log.sha256}" in html(response)


@pytest.mark.django_db
def test_a_screenshot_is_served_as_a_sandboxed_png(client, flow):
    _, attempt = flow.claimed()
    shot = flow.attach(attempt, screenshot(), kind="screenshot", name="queue.png")
    client.force_login(flow.reviewer)

    response = client.get(f"/evidence/{shot.pk}/image/")
    page = html(client.get(f"/evidence/{shot.pk}/"))

    assert (response.status_code, response["Content-Type"]) == (200, "image/png")
    assert response["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert b"".join(response.streaming_content) == screenshot()
    assert f'<img src="/evidence/{shot.pk}/image/" alt="queue.png"' in page


@pytest.mark.django_db
def test_the_image_view_streams_a_byte_range(client, flow):
    _, attempt = flow.claimed()
    shot = flow.attach(attempt, screenshot(), kind="screenshot", name="queue.png")
    client.force_login(flow.reviewer)

    response = client.get(f"/evidence/{shot.pk}/image/", HTTP_RANGE="bytes=0-7")

    assert response.status_code == 206
    assert b"".join(response.streaming_content) == screenshot()[:8] == b"\x89PNG\r\n\x1a\n"
    assert response["Content-Range"] == f"bytes 0-7/{len(screenshot())}"
    assert (response["Content-Length"], response["Accept-Ranges"]) == ("8", "bytes")
    assert (response["Content-Type"], response["X-Content-Type-Options"]) == (
        "image/png",
        "nosniff",
    )
    assert response["Content-Security-Policy"] == "default-src 'none'; sandbox"


@pytest.mark.django_db
def test_an_image_range_past_its_end_is_416(client, flow):
    _, attempt = flow.claimed()
    shot = flow.attach(attempt, screenshot(), kind="screenshot", name="queue.png")
    client.force_login(flow.reviewer)

    response = client.get(f"/evidence/{shot.pk}/image/", HTTP_RANGE=f"bytes={shot.size}-")

    assert (response.status_code, response.json()["code"]) == (416, "range_not_satisfiable")
    assert response["Content-Range"] == f"bytes */{shot.size}"


INLINE_KINDS = {
    "junit": (JUNIT_PASSED, "junit.xml"),
    "diff": (git_diff({"a.py": "x = 1\n"}, {"a.py": "x = 2\n"}), "change.diff"),
    "log": (b"\x1b[32mok\x1b[0m\n", "run.log"),
    "screenshot": (screenshot(), "queue.png"),
    "note": (b"# Notes\n", "notes.md"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", INLINE_KINDS)
def test_a_file_over_the_inline_limit_is_linked_not_read(client, flow, settings, monkeypatch, kind):
    content, name = INLINE_KINDS[kind]
    task, attempt = flow.claimed()
    item = flow.attach(attempt, content, kind=kind, name=name)
    settings.FACTORY_INLINE_MAX_BYTES = item.size - 1
    monkeypatch.setattr(storage, "open_blob", lambda name: pytest.fail("a page read the file"))
    client.force_login(flow.reviewer)

    pages = [html(client.get(f"/tasks/{task.key}/")), html(client.get(f"/evidence/{item.pk}/"))]

    link = f'too large to show here: <a href="/api/v1/evidence/{item.pk}/content/">download it</a>'
    assert [link in page for page in pages] == [True, True]
    assert not any(
        marker in page
        for page in pages
        for marker in (
            "<img",
            '<table class="junit',
            '<pre class="log',
            '<pre class="note',
            'class="diff"',
        )
    )


@pytest.mark.django_db
def test_a_file_at_the_inline_limit_is_rendered(client, flow, settings):
    task, attempt = flow.claimed()
    item = flow.attach(attempt, JUNIT_PASSED, kind="junit", name="junit.xml")
    settings.FACTORY_INLINE_MAX_BYTES = item.size
    client.force_login(flow.reviewer)

    page = html(client.get(f"/tasks/{task.key}/"))

    assert '<td class="mono">tests/test_claim.py::test_ok</td>' in page
    assert "too large to show here" not in page


@pytest.mark.django_db
def test_a_log_is_never_served_as_an_image(client, flow):
    _, attempt = flow.claimed()
    log = flow.attach(attempt, b"<svg onload=alert(1)>\n", name="x.svg")
    client.force_login(flow.reviewer)

    response = client.get(f"/evidence/{log.pk}/image/")

    assert response.status_code == 404


@pytest.mark.django_db
def test_another_projects_evidence_is_404(client, flow, other_flow):
    _, attempt = flow.claimed()
    shot = flow.attach(attempt, screenshot(), kind="screenshot", name="queue.png")
    client.force_login(other_flow.reviewer)

    responses = [client.get(f"/evidence/{shot.pk}/"), client.get(f"/evidence/{shot.pk}/image/")]

    assert [r.status_code for r in responses] == [404, 404]
