"""The review UI's task page: what it shows, the review form, the manager's actions and the
gate panel, and its query count."""

import re

import pytest

from decisions import services as decision_services
from demo.artifacts import git_diff
from projects.models import Event
from tasks import attempts
from tests.factories import member
from tests.tasks.pages import JUNIT_PASSED, html, messages_of, queries_for, state_of

HANDOFF_HEADINGS = ["What changed?", "Why?", "What remains open?", "Authoritative evidence"]
HOSTILE_JUNIT = b"""<testsuite tests="1"><testcase classname="tests.test_x" name="test_bad">
<failure message="&lt;img src=x onerror=alert(1)&gt;">trace</failure></testcase></testsuite>"""


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


@pytest.mark.django_db
def test_a_cancel_whose_reason_cannot_be_kept_is_refused_and_changes_nothing(client, flow):
    task = flow.ready(title="Keep me")
    events = Event.objects.count()
    client.force_login(flow.manager)

    response = client.post(f"/tasks/{task.key}/cancel/", {"reason": "x" * 10_001}, follow=True)

    assert "Not done: reason: Ensure this value has at most 10000 characters" in html(response)
    assert (state_of(task), Event.objects.count()) == ("ready", events)


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


# --- Query counts ----------------------------------------------------------------------------


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
