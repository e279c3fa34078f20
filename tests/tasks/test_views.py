"""The review UI's task pages: login, queue, board, task page, review, gates, evidence, tokens."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from knox.crypto import hash_token
from knox.models import AuthToken
from knox.settings import CONSTANTS

from decisions import services as decision_services
from evidence import services as evidence_services
from evidence import storage
from evidence.models import GateRun
from projects.models import Event
from tasks import attempts
from tasks.demo.artifacts import git_diff, screenshot
from tasks.filters import TaskFilter
from tasks.models import Attempt, Task, TaskState
from tests.factories import member

HANDOFF_HEADINGS = ["What changed?", "Why?", "What remains open?", "Authoritative evidence"]
JUNIT_PASSED = (
    b'<testsuite tests="1"><testcase classname="tests.test_claim" name="test_ok"/></testsuite>'
)
HOSTILE_JUNIT = b"""<testsuite tests="1"><testcase classname="tests.test_x" name="test_bad">
<failure message="&lt;img src=x onerror=alert(1)&gt;">trace</failure></testcase></testsuite>"""


def html(response) -> str:
    return response.content.decode()


def state_of(task) -> str:
    return Task.objects.get(pk=task.pk).state


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def resubmit(flow, task):
    """Claim ``task`` again after its attempt ended, submit, and pass the gates."""
    attempt = attempts.task_claim(agent=flow.agent, project=flow.project)
    assert attempt.task_id == task.pk
    attempt = attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="2", change={})
    return attempts.attempt_gates_passed(attempt=attempt)


def propose(flow, **kwargs):
    return decision_services.decision_propose(
        project=flow.project,
        actor=flow.reviewer,
        title="Claim with SKIP LOCKED",
        context="Two agents must never get the same task.",
        decision="Use SELECT ... FOR UPDATE SKIP LOCKED.",
        **kwargs,
    )


def criteria_of(page: str) -> list[tuple[str, str, str]]:
    """(row class, criterion key, badge) of each row of the acceptance criteria table."""
    return re.findall(
        r'<tr class="criterion-(met|unmet)" id="criterion-AC-\d">\s*<td><strong>(AC-\d)</strong>'
        r'.*?<td><span class="badge \w+">([\w ]+)</span></td>',
        page,
        re.S,
    )


def finish_run(run, outcome):
    evidence_services.gate_run_start(run=run)
    evidence_services.gate_run_finish(
        run=run, outcome=outcome, verdict={"outcome": outcome}, summary=f"{run.gate} {outcome}"
    )


# --- Login and home --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/", "/review/", "/tasks/", "/tasks/FM-1/", "/decisions/", "/dashboard/", "/tokens/"]
)
def test_anonymous_users_are_sent_to_the_login_page(client, flow, path):
    flow.draft()

    response = client.get(path)

    assert (response.status_code, response["Location"]) == (302, f"/login/?next={path}")


@pytest.mark.django_db
def test_the_login_page_renders_a_form_with_a_csrf_token(client):
    response = client.get("/login/?next=/review/")

    assert response.status_code == 200
    assert '<input type="password" name="password"' in html(response)
    assert '<input type="hidden" name="next" value="/review/">' in html(response)
    assert 'name="csrfmiddlewaretoken"' in html(response)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "home"), [("reviewer", "/review/"), ("manager", "/dashboard/"), ("agent", "/tasks/")]
)
def test_logging_in_lands_on_the_users_home(client, flow, role, home):
    user = getattr(flow, role)

    response = client.post("/login/", {"username": user.username, "password": "pw"}, follow=True)

    assert response.redirect_chain == [("/", 302), (home, 302)]
    assert (response.status_code, response.wsgi_request.user) == (200, user)


@pytest.mark.django_db
def test_a_wrong_password_stays_on_the_login_page(client, flow):
    response = client.post("/login/", {"username": flow.reviewer.username, "password": "nope"})

    assert response.status_code == 200
    assert "Your username and password didn't match." in html(response)
    assert "_auth_user_id" not in client.session


# --- Review queue ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_review_queue_lists_in_review_tasks_oldest_submission_first(client, flow):
    for title in ("First", "Second", "Third"):
        flow.in_review(title=title)
    flow.claimed(title="Still being worked on")
    client.force_login(flow.reviewer)

    response = client.get("/review/")

    assert response.status_code == 200
    assert [row["task"].key for row in response.context["rows"]] == ["FM-1", "FM-2", "FM-3"]
    keys = re.findall(r'<a href="/tasks/(FM-\d+)/" class="mono">', html(response))
    assert keys == ["FM-1", "FM-2", "FM-3"]


@pytest.mark.django_db
def test_review_queue_orders_by_submission_not_by_key(client, flow):
    first, attempt = flow.in_review()
    flow.in_review()
    Attempt.objects.filter(pk=attempt.pk).update(submitted_at=timezone.now())
    client.force_login(flow.reviewer)

    response = client.get("/review/")

    assert [row["task"].key for row in response.context["rows"]] == ["FM-2", first.key]


@pytest.mark.django_db
def test_review_queue_project_filter_narrows_it(client, flow, other_flow):
    flow.in_review()
    other_flow.in_review()
    member(other_flow.project, "reviewer", flow.reviewer.username)
    client.force_login(flow.reviewer)

    everything = client.get("/review/")
    narrowed = client.get("/review/?project=OT")

    assert [row["task"].key for row in everything.context["rows"]] == ["FM-1", "OT-1"]
    assert [row["task"].key for row in narrowed.context["rows"]] == ["OT-1"]
    assert '<option value="OT" selected>' in html(narrowed)


@pytest.mark.django_db
def test_review_queue_never_shows_another_projects_tasks(client, flow, other_flow):
    flow.in_review()
    other_flow.in_review()
    client.force_login(flow.reviewer)

    unfiltered = client.get("/review/")
    asked_for = client.get("/review/?project=OT")

    assert [row["task"].key for row in unfiltered.context["rows"]] == ["FM-1"]
    assert asked_for.context["rows"] == []
    assert "OT-1" not in html(unfiltered) + html(asked_for)


def failed_then_in_review(flow):
    """A task whose first attempt failed two gates and whose second passed every gate."""
    task, attempt = flow.checking()
    runs = list(attempt.gate_runs.order_by("gate"))  # diff-scope, required-evidence, ...
    finish_run(runs[0], "failed")
    finish_run(runs[1], "error")
    finish_run(runs[2], "passed")
    attempts.attempt_gates_failed(attempt=attempt, reason="gates failed")
    resubmit(flow, task)
    return task


@pytest.mark.django_db
def test_review_queue_counts_the_current_attempts_failed_gates_apart_from_earlier_ones(
    client, flow
):
    failed_then_in_review(flow)
    flow.in_review()
    client.force_login(flow.reviewer)

    response = client.get("/review/")

    rows = [
        (row["task"].key, row["task"].failed_gates, row["task"].earlier_failed_gates)
        for row in response.context["rows"]
    ]
    assert rows == [("FM-1", 0, 2), ("FM-2", 0, 0)]
    cells = re.findall(r'<td class="num">(0.*?)</td>', html(response))
    assert cells == ['0 <span class="muted small">(2 in earlier attempts)</span>', "0"]
    assert 'class="badge bad"' not in html(response)


@pytest.mark.django_db
def test_review_queue_shows_the_current_attempts_own_failed_gate_as_a_badge(client, flow):
    task = Task.objects.get(pk=failed_then_in_review(flow).pk)
    # No gate lets a failed run through to review today; forced so the two counts differ.
    GateRun.objects.filter(attempt=task.current_attempt, gate="diff-scope").update(state="failed")
    client.force_login(flow.reviewer)

    page = html(client.get("/review/"))

    assert (
        '<td class="num"><span class="badge bad">1</span>'
        ' <span class="muted small">(2 in earlier attempts)</span></td>'
    ) in page


# --- Task board ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_board_puts_each_task_in_the_column_of_its_state(client, flow):
    flow.in_review()
    flow.claimed()
    flow.draft()
    flow.ready()
    flow.cancelled()
    client.force_login(flow.agent)

    response = client.get("/tasks/")

    columns = {c["state"]: [t.key for t in c["cards"]] for c in response.context["columns"]}
    assert columns == {
        "draft": ["FM-3"],
        "ready": ["FM-4"],
        "claimed": ["FM-2"],
        "checking": [],
        "in_review": ["FM-1"],
        "approved": [],
        "blocked": [],
        "failed": [],
        "done": [],
        "cancelled": ["FM-5"],
    }
    in_review = re.search(r'aria-label="In Review">(.*?)</section>', html(response), re.S)[1]
    assert re.findall(r'<a class="card" href="/tasks/([\w-]+)/">', in_review) == ["FM-1"]


@pytest.mark.django_db
def test_board_finds_tasks_by_title_or_key(client, flow):
    flow.draft(title="Fix the login page")
    flow.draft(title="Write the deployment guide")
    client.force_login(flow.manager)

    by_title = client.get("/tasks/?q=LOGIN")
    by_key = client.get("/tasks/?q=fm-2")

    def keys(response):
        return [t.key for c in response.context["columns"] for t in c["cards"]]

    assert keys(by_title) == ["FM-1"]
    assert keys(by_key) == ["FM-2"]
    assert "Write the deployment guide" not in html(by_title)


@pytest.mark.django_db
def test_board_filters_labels_through_the_apis_filterset(client, api, flow, monkeypatch):
    flow.draft(title="Ours", labels=["ui"])
    flow.draft(title="Theirs", labels=["api"])
    asked, filter_label = [], TaskFilter.filter_label
    monkeypatch.setattr(
        TaskFilter,
        "filter_label",
        lambda self, tasks, name, value: (
            asked.append(value) or filter_label(self, tasks, name, value)
        ),
    )
    client.force_login(flow.manager)

    board = client.get("/tasks/?label=ui")
    listed = api(flow.manager).get("/api/v1/tasks/?label=ui")

    assert [t.key for c in board.context["columns"] for t in c["cards"]] == ["FM-1"]
    assert [t["key"] for t in listed.json()["results"]] == ["FM-1"]
    assert asked == ["ui", "ui"]


@pytest.mark.django_db
def test_board_never_shows_another_projects_tasks(client, flow, other_flow):
    flow.draft(title="Ours")
    other_flow.draft(title="Theirs")
    client.force_login(flow.manager)

    response = client.get("/tasks/?project=OT")
    unfiltered = client.get("/tasks/")

    assert [t.key for c in response.context["columns"] for t in c["cards"]] == []
    assert [t.key for c in unfiltered.context["columns"] for t in c["cards"]] == ["FM-1"]
    assert "Theirs" not in html(unfiltered)


# --- Task page -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_task_page_is_404_outside_the_users_projects(client, flow, other_flow):
    flow.draft()
    client.force_login(other_flow.reviewer)

    response = client.get("/tasks/FM-1/")

    assert response.status_code == 404


@pytest.mark.django_db
def test_task_page_shows_the_handoff_criteria_evidence_and_gate_runs(client, flow):
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec, title="Exclusive claims")
    junit = flow.attach(attempt, JUNIT_PASSED, kind="junit", name="junit.xml", criteria=["AC-1"])
    log = flow.attach(attempt, b"all good\n", kind="log", name="run.log")
    attempts.attempt_submit(
        attempt=attempt, actor=flow.agent, summary="Claims lock rows", change={}
    )
    client.force_login(flow.reviewer)

    response = client.get(f"/tasks/{task.key}/")

    assert response.status_code == 200
    page = html(response)
    assert [h for h in HANDOFF_HEADINGS if f"<h2>{h}</h2>" in page] == HANDOFF_HEADINGS
    assert "<p>Claims lock rows</p>" in page
    assert criteria_of(page) == [
        ("unmet", "AC-1", "unmet"),
        ("unmet", "AC-2", "unmet"),
        ("unmet", "AC-3", "unmet"),
    ]
    rows = re.findall(
        r'<tr>\s*<td>(\w+)</td>\s*<td><a href="/evidence/(\d+)/">([^<]+)</a></td>', page
    )
    assert rows == [("junit", str(junit.pk), "junit.xml"), ("log", str(log.pk), "run.log")]
    gates = re.findall(
        r'<span class="name">([\w-]+)</span>\s*<span class="badge state-(\w+)">', page
    )
    assert gates == [
        (g, "queued") for g in ("diff-scope", "required-evidence", "spec-current", "tests-pass")
    ]


@pytest.mark.django_db
def test_task_page_marks_met_criteria(client, flow):
    flow.gates({})
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec)
    flow.attach(attempt, JUNIT_PASSED, kind="junit", name="junit.xml", criteria=["AC-1"])
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})
    attempts.attempt_gates_passed(attempt=attempt)
    client.force_login(flow.reviewer)

    page = html(client.get(f"/tasks/{task.key}/"))

    assert criteria_of(page) == [
        ("met", "AC-1", "met"),
        ("unmet", "AC-2", "unmet"),
        ("unmet", "AC-3", "your call"),
    ]


@pytest.mark.django_db
def test_task_page_switches_to_the_attempt_asked_for(client, flow):
    task, first = flow.claimed()
    flow.attach(first, b"first try\n", name="first.log")
    attempts.attempt_release(attempt=first, actor=flow.agent, reason="wrong approach")
    second = attempts.task_claim(agent=flow.agent2, project=flow.project)
    flow.attach(second, b"second try\n", name="second.log")
    client.force_login(flow.reviewer)

    latest = client.get(f"/tasks/{task.key}/")
    earlier = client.get(f"/tasks/{task.key}/?attempt=1")

    assert (latest.context["attempt"], earlier.context["attempt"]) == (second, first)
    assert ("second.log" in html(latest), "first.log" in html(latest)) == (True, False)
    assert ("first.log" in html(earlier), "second.log" in html(earlier)) == (True, False)
    assert '<a class="badge state-released" href="?attempt=1" aria-current="true"' in html(earlier)


@pytest.mark.django_db
def test_task_page_escapes_hostile_titles_logs_junit_messages_and_paths(client, flow):
    task, attempt = flow.claimed(title="<script>alert(1)</script> title")
    flow.attach(attempt, b"\x1b[31mboom\x1b[0m <script>alert(1)</script>\n", name="hostile.log")
    flow.attach(attempt, HOSTILE_JUNIT, kind="junit", name="junit.xml")
    diff = git_diff({"README": "x\n"}, {"README": "x\n", "<b>evil</b>.py": "print(1)\n"})
    flow.attach(attempt, diff, kind="diff", name="change.diff")
    client.force_login(flow.reviewer)

    page = html(client.get(f"/tasks/{task.key}/"))

    assert "<h1>&lt;script&gt;alert(1)&lt;/script&gt; title</h1>" in page
    assert '<span class="ansi-31">boom</span> &lt;script&gt;alert(1)&lt;/script&gt;' in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<summary>&lt;b&gt;evil&lt;/b&gt;.py <span" in page
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "<b>evil</b>" not in page
    assert "\x1b" not in page


# --- Review form -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_reviewer_approves_from_the_task_page(client, flow):
    task, _ = flow.in_review()
    client.force_login(flow.reviewer)

    response = client.post(f"/tasks/{task.key}/review/", {"verdict": "approve"})

    assert (response.status_code, response["Location"]) == (302, "/review/")
    assert state_of(task) == "done"
    assert Event.objects.filter(object_key=task.key).last().transition == "approve"


@pytest.mark.django_db
def test_rejecting_without_a_reason_is_refused_and_changes_nothing(client, flow):
    task, _ = flow.in_review()
    events = Event.objects.count()
    client.force_login(flow.reviewer)

    response = client.post(f"/tasks/{task.key}/review/", {"verdict": "reject", "reason": "  "})

    assert response.status_code == 400  # the page again, with what was typed
    assert messages_of(response) == [
        "Not recorded: a rejection needs a reason, or a criterion marked not met, that the next attempt can act on"
    ]
    assert (state_of(task), Event.objects.count()) == ("in_review", events)


@pytest.mark.django_db
def test_a_reviewer_rejects_with_a_reason(client, flow):
    task, attempt = flow.in_review()
    client.force_login(flow.reviewer)

    response = client.post(
        f"/tasks/{task.key}/review/", {"verdict": "reject", "reason": "No tests"}
    )

    assert (response.status_code, response["Location"]) == (302, "/review/")
    attempt.refresh_from_db()
    assert (state_of(task), attempt.state, attempt.end_reason) == ("ready", "rejected", "No tests")


@pytest.mark.django_db
def test_the_submitting_agent_cannot_judge_their_own_attempt(client, flow):
    task, _ = flow.in_review()
    member(flow.project, "reviewer", flow.agent.username)
    events = Event.objects.count()
    client.force_login(flow.agent)

    page = html(client.get(f"/tasks/{task.key}/"))
    response = client.post(f"/tasks/{task.key}/review/", {"verdict": "approve"}, follow=True)

    assert (
        '<p class="notice">You submitted this attempt; another reviewer must judge it.</p>' in page
    )
    assert 'value="approve"' not in page
    assert messages_of(response) == [
        "Not recorded: you submitted this attempt; another reviewer must judge it"
    ]
    assert (state_of(task), Event.objects.count()) == ("in_review", events)


@pytest.mark.django_db
def test_a_reviewer_of_another_project_gets_404_and_changes_nothing(client, flow, other_flow):
    task, _ = flow.in_review()
    events = Event.objects.count()
    client.force_login(other_flow.reviewer)

    response = client.post(f"/tasks/{task.key}/review/", {"verdict": "approve"})

    assert response.status_code == 404
    assert (state_of(task), Event.objects.count()) == ("in_review", events)


@pytest.mark.django_db
def test_the_review_form_is_shown_to_reviewers_only(client, flow):
    task, _ = flow.in_review()

    client.force_login(flow.agent2)
    as_agent = html(client.get(f"/tasks/{task.key}/"))
    client.force_login(flow.reviewer)
    as_reviewer = html(client.get(f"/tasks/{task.key}/"))

    assert 'name="verdict" value="approve"' not in as_agent
    assert "Waiting for a reviewer of FM." in as_agent
    assert 'name="verdict" value="approve"' in as_reviewer
    assert 'name="verdict" value="reject"' in as_reviewer


# --- Manager actions -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_manager_publishes_a_draft(client, flow):
    task = flow.draft()
    client.force_login(flow.manager)

    response = client.post(f"/tasks/{task.key}/publish/", {"reason": "go"}, follow=True)

    assert response.redirect_chain == [(f"/tasks/{task.key}/", 302)]
    assert messages_of(response) == [f"{task.key}: publish done."]
    assert state_of(task) == "ready"
    assert Event.objects.filter(object_key=task.key).last().reason == "go"


@pytest.mark.django_db
def test_a_reviewer_cannot_publish(client, flow):
    task = flow.draft()
    events = Event.objects.count()
    client.force_login(flow.reviewer)

    response = client.post(f"/tasks/{task.key}/publish/", follow=True)

    assert messages_of(response) == ["Not done: this needs the manager role in the project"]
    assert (state_of(task), Event.objects.count()) == ("draft", events)
    assert 'action="/tasks/FM-1/publish/"' not in html(response)


@pytest.mark.django_db
def test_an_unknown_action_is_404_and_get_is_405(client, flow):
    task = flow.draft()
    events = Event.objects.count()
    client.force_login(flow.manager)

    unknown = client.post(f"/tasks/{task.key}/explode/")
    read = client.get(f"/tasks/{task.key}/publish/")

    assert (unknown.status_code, read.status_code) == (404, 405)
    assert (state_of(task), Event.objects.count()) == ("draft", events)


# --- Gate panel ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_gate_panel_polls_while_the_attempt_is_checking(client, flow):
    task, _ = flow.checking()
    client.force_login(flow.reviewer)

    response = client.get(f"/tasks/{task.key}/gates/", headers={"HX-Request": "true"})

    assert response.status_code == 200
    assert 'hx-get="/tasks/FM-1/gates/" hx-trigger="every 2s, factory:refresh"' in html(response)
    assert "HX-Refresh" not in response
    assert "<html" not in html(response)


@pytest.mark.django_db
def test_the_gate_panel_asks_for_a_reload_once_checking_is_over(client, flow):
    task, _ = flow.in_review()
    client.force_login(flow.reviewer)

    polled = client.get(f"/tasks/{task.key}/gates/", headers={"HX-Request": "true"})
    plain = client.get(f"/tasks/{task.key}/gates/")

    assert polled["HX-Refresh"] == "true"
    assert "hx-trigger" not in html(polled)
    assert "HX-Refresh" not in plain


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


# --- Tokens ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_tokens_page_lists_only_the_users_tokens(client, flow):
    mine, _ = AuthToken.objects.create(user=flow.agent)
    theirs, _ = AuthToken.objects.create(user=flow.reviewer)
    client.force_login(flow.agent)

    response = client.get("/tokens/")

    assert list(response.context["rows"]) == [mine]
    assert f'value="{mine.token_key}"' in html(response)
    assert theirs.token_key not in html(response)


@pytest.mark.django_db
def test_a_new_token_is_shown_once_and_only_its_hash_is_kept(client, flow):
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": "7"})
    token = response.context["created"]
    later = client.get("/tokens/")

    assert response.status_code == 200
    assert token.startswith("fm_")
    assert f'<pre class="mono" id="new-token">{token}</pre>' in html(response)
    row = AuthToken.objects.get(user=flow.agent)
    assert (row.digest, row.token_key) == (hash_token(token), token[: CONSTANTS.TOKEN_KEY_LENGTH])
    assert timedelta(days=7) - (row.expiry - timezone.now()) < timedelta(minutes=1)
    assert token not in html(later)


@pytest.mark.django_db
def test_the_answer_that_shows_a_new_token_is_never_cached(client, flow):
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": "7"})

    assert response.context["created"] in html(response)
    assert "no-store" in response["Cache-Control"].replace(" ", "").split(",")
    assert response["Pragma"] == "no-cache"


@pytest.mark.django_db
@pytest.mark.parametrize("days", ["0", "91"])
def test_an_agent_cannot_issue_a_token_that_never_expires_or_outlives_90_days(client, flow, days):
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": days})

    assert response.status_code == 200
    assert response.context["created"] is None
    assert response.context["form"].errors["days"] == [
        "Ensure this value is greater than or equal to 1."
        if days == "0"
        else "fm-agent's tokens last 1 to 90 days (the agent bound, "
        "FACTORY_TOKEN_MAX_DAYS_AGENT); none lasts forever"
    ]
    assert AuthToken.objects.count() == 0


@pytest.mark.django_db
def test_a_number_of_days_too_long_to_read_is_a_form_error_not_a_500(client, flow):
    client.force_login(flow.manager)

    response = client.post("/tokens/", {"days": "9" * 5000})

    assert response.status_code == 200
    assert response.context["form"].errors["days"] == ["Enter a whole number."]
    assert AuthToken.objects.count() == 0


@pytest.mark.django_db
def test_a_manager_may_issue_a_token_for_a_year(client, flow):
    client.force_login(flow.manager)

    page = client.get("/tokens/")
    client.post("/tokens/", {"days": "365"})

    assert "Days until it expires (1 to 365)" in html(page)
    assert AuthToken.objects.get().expiry - timezone.now() > timedelta(days=364)


@pytest.mark.django_db
def test_a_token_past_the_cap_is_a_form_error_naming_it(client, flow, settings):
    settings.FACTORY_TOKEN_MAX_PER_USER = 2
    for _ in range(2):
        AuthToken.objects.create(user=flow.agent)
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": "7"})

    assert response.context["created"] is None
    assert response.context["form"].non_field_errors() == [
        "fm-agent already has 2 unexpired tokens, the most allowed "
        "(FACTORY_TOKEN_MAX_PER_USER=2); revoke one first, on the API tokens page (/tokens/) "
        "or in the admin"
    ]
    assert AuthToken.objects.filter(user=flow.agent).count() == 2


@pytest.mark.django_db
def test_revoking_a_token_deletes_it(client, flow):
    row, _ = AuthToken.objects.create(user=flow.agent)
    client.force_login(flow.agent)

    response = client.post("/tokens/revoke/", {"token_key": row.token_key}, follow=True)

    assert response.redirect_chain == [("/tokens/", 302)]
    assert messages_of(response) == ["Token revoked."]
    assert AuthToken.objects.filter(user=flow.agent).count() == 0


@pytest.mark.django_db
def test_revoking_someone_elses_token_deletes_nothing(client, flow):
    theirs, _ = AuthToken.objects.create(user=flow.reviewer)
    client.force_login(flow.agent)

    response = client.post("/tokens/revoke/", {"token_key": theirs.token_key}, follow=True)

    assert messages_of(response) == ["No such token."]
    assert list(AuthToken.objects.all()) == [theirs]


# --- Security headers and CSRF ---------------------------------------------------------------


@pytest.mark.django_db
def test_every_page_sends_a_strict_csp_and_denies_framing(client, flow):
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec)
    log = flow.attach(attempt, b"x\n")
    client.force_login(flow.manager)
    pages = ["/review/", "/tasks/", f"/tasks/{task.key}/", f"/tasks/{task.key}/gates/"]
    pages += [f"/evidence/{log.pk}/", "/decisions/", f"/specs/{spec.key}/", "/dashboard/"]
    pages += ["/tokens/"]

    responses = [client.get(path) for path in pages] + [Client().get("/login/")]

    assert [r.status_code for r in responses] == [200] * 10
    assert all("script-src 'self'" in r["Content-Security-Policy"] for r in responses)
    assert all(r["X-Frame-Options"] == "DENY" for r in responses)


@pytest.mark.django_db
def test_forms_carry_a_csrf_token_and_a_post_without_it_is_403(flow):
    task, _ = flow.in_review()
    events = Event.objects.count()
    client = Client(enforce_csrf_checks=True)
    client.force_login(flow.reviewer)

    page = html(client.get(f"/tasks/{task.key}/"))
    forged = client.post(f"/tasks/{task.key}/review/", {"verdict": "approve"})

    assert forged.status_code == 403
    assert (state_of(task), Event.objects.count()) == ("in_review", events)
    form = re.search(r'<form method="post" action="/tasks/FM-1/review/".*?</form>', page, re.S)[0]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)[1]
    genuine = client.post(
        f"/tasks/{task.key}/review/", {"verdict": "approve", "csrfmiddlewaretoken": token}
    )
    assert (genuine.status_code, state_of(task)) == (302, "done")


# --- Query counts ----------------------------------------------------------------------------


def queries_for(client, path, assert_max) -> int:
    client.get(path)  # warms the per-process caches (content types) first
    with assert_max(15) as captured:
        assert client.get(path).status_code == 200
    return len(captured.captured_queries)


@pytest.mark.django_db
def test_review_queue_query_count_does_not_grow(client, flow, django_assert_max_num_queries):
    flow.in_review()
    client.force_login(flow.reviewer)
    one = queries_for(client, "/review/", django_assert_max_num_queries)
    for _ in range(49):
        flow.in_review()

    many = queries_for(client, "/review/", django_assert_max_num_queries)

    assert many == one


@pytest.mark.django_db
def test_review_queue_query_count_does_not_grow_with_earlier_failed_attempts(
    client, flow, django_assert_max_num_queries
):
    flow.in_review()
    client.force_login(flow.reviewer)
    one = queries_for(client, "/review/", django_assert_max_num_queries)
    for _ in range(10):
        failed_then_in_review(flow)

    many = queries_for(client, "/review/", django_assert_max_num_queries)

    assert many == one
    assert html(client.get("/review/")).count("(2 in earlier attempts)") == 10


@pytest.mark.django_db
def test_board_query_count_does_not_grow(client, flow, django_assert_max_num_queries):
    flow.claimed()
    client.force_login(flow.reviewer)
    one = queries_for(client, "/tasks/", django_assert_max_num_queries)
    for _ in range(49):
        flow.claimed()

    many = queries_for(client, "/tasks/", django_assert_max_num_queries)

    assert many == one


@pytest.mark.django_db
def test_task_page_query_count_does_not_grow(client, flow, django_assert_max_num_queries):
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec)
    propose(flow, tasks=[task])
    flow.attach(attempt, b"log 0\n", name="0.log", criteria=["AC-2"])
    client.force_login(flow.reviewer)
    one = queries_for(client, f"/tasks/{task.key}/", django_assert_max_num_queries)
    for n in range(1, 50):
        flow.attach(attempt, f"log {n}\n".encode(), name=f"{n}.log", criteria=["AC-2"])

    many = queries_for(client, f"/tasks/{task.key}/", django_assert_max_num_queries)

    assert many == one


def test_the_board_has_a_column_for_every_state(client, flow):
    client.force_login(flow.agent)

    response = client.get("/tasks/")

    assert sorted(c["state"] for c in response.context["columns"]) == sorted(TaskState.values)


@pytest.mark.django_db
def test_a_cancel_whose_reason_cannot_be_kept_is_refused_and_changes_nothing(client, flow):
    task = flow.ready(title="Keep me")
    events = Event.objects.count()
    client.force_login(flow.manager)

    response = client.post(f"/tasks/{task.key}/cancel/", {"reason": "x" * 10_001}, follow=True)

    assert "Not done: reason: Ensure this value has at most 10000 characters" in html(response)
    assert (state_of(task), Event.objects.count()) == ("ready", events)
