"""A reviewer and a manager at work in a real browser (Chromium) against a live server."""

import pytest
from drf_spectacular.generators import SchemaGenerator
from playwright.sync_api import expect

from decisions import services as decisions
from factory_site.middleware import CSP
from tasks import attempts
from tasks.models import Task
from tests.ui.conftest import pytestmark as needs_chromium

pytestmark = [needs_chromium, pytest.mark.django_db(transaction=True)]

FAILING_JUNIT = (
    b"<testsuite tests='2'><testcase classname='tests.test_claim' name='test_priority'/>"
    b"<testcase classname='tests.test_claim' name='test_skip_deps'>"
    b"<failure message='assert FM-2 == FM-3'>dependencies were ignored</failure></testcase></testsuite>"
)
PASSING_JUNIT = (
    b"<testsuite tests='2'><testcase classname='tests.test_claim' name='test_priority'/>"
    b"<testcase classname='tests.test_claim' name='test_skip_deps'/></testsuite>"
)
DIFF = (
    b"diff --git a/tasks/queue.py b/tasks/queue.py\n--- a/tasks/queue.py\n+++ b/tasks/queue.py\n"
    b"@@ -1,2 +1,3 @@\n def claim(tasks):\n-    return tasks[0]\n+    ready = [t for t in tasks if t.ready]\n+    return ready[0]\n"
)


def submitted(flow, agent, junit):
    attempt = attempts.task_claim(agent=agent, project=flow.project)
    flow.attach(attempt, junit, kind="junit", name="junit.xml")
    flow.attach(attempt, DIFF, kind="diff", name="change.diff")
    attempts.attempt_submit(
        attempt=attempt,
        actor=agent,
        summary="Claim skips open dependencies",
        change={"commit": "abcdef1000000000000000000000000000000000"},
    )
    return attempt


def test_a_reviewer_rejects_with_a_reason_then_approves_a_later_attempt(
    page, live_server, flow, login, shoot
):
    flow.gates({})  # straight to review: the reviewer is the gate here
    task = flow.ready(title="Claim honours dependencies", allowed_paths=["tasks/**"])
    submitted(flow, flow.agent, FAILING_JUNIT)

    login(page, flow.reviewer)
    expect(page).to_have_url(f"{live_server.url}/review/")
    shoot(page, "review-queue")
    page.click(f"text={task.key}")
    expect(page.locator("h1")).to_have_text("Claim honours dependencies")
    junit = page.locator("details.viewer", has_text="junit.xml")
    expect(junit.locator("tr.failed").first).to_contain_text("tests/test_claim.py::test_skip_deps")
    expect(junit).to_contain_text("dependencies were ignored")
    expect(page.locator(".diff")).to_contain_text("ready = [t for t in tasks if t.ready]")
    shoot(page, "task-in-review")
    page.fill("#id_reason", "test_skip_deps fails: filter out tasks whose dependencies are open")
    page.click("button.reject")
    expect(page.locator(".messages")).to_contain_text(f"{task.key} rejected.")

    submitted(flow, flow.agent2, PASSING_JUNIT)
    page.goto(f"{live_server.url}/review/")
    page.click(f"text={task.key}")
    expect(page.locator(".handoff")).to_contain_text("was rejected: test_skip_deps fails")
    page.click("button.approve")
    expect(page.locator(".messages")).to_contain_text(f"{task.key} approved.")
    assert Task.objects.get(pk=task.pk).state == "done"
    page.goto(f"{live_server.url}/tasks/{task.key}/")
    shoot(page, "task-done")


def test_a_submitter_cannot_approve_their_own_work_in_the_browser(page, live_server, flow, login):
    flow.gates({})
    task = flow.ready(title="Own work")
    submitted(flow, flow.agent, PASSING_JUNIT)
    from tests.factories import member

    member(flow.project, "reviewer", flow.agent.username)

    login(page, flow.agent)
    page.goto(f"{live_server.url}/tasks/{task.key}/")

    expect(page.locator(".notice")).to_have_text(
        "You submitted this attempt; another reviewer must judge it."
    )
    expect(page.locator("button.approve")).to_have_count(0)
    assert Task.objects.get(pk=task.pk).state == "in_review"


def test_a_manager_searches_the_decision_log_and_follows_the_supersession_chain(
    page, live_server, flow, login, shoot
):
    first = decisions.decision_propose(
        project=flow.project,
        actor=flow.manager,
        title="Claim under a table lock",
        context="Two agents must not share a task.",
        decision="LOCK TABLE around each claim.",
    )
    decisions.decision_accept(decision=first, actor=flow.reviewer)
    second = decisions.decision_propose(
        project=flow.project,
        actor=flow.manager,
        title="Claim with SKIP LOCKED",
        context="The table lock serialises every agent.",
        decision="FOR UPDATE SKIP LOCKED.",
        alternatives=[{"option": "Keep the table lock", "reason": "flat at two agents"}],
        supersedes=[first],
    )
    decisions.decision_accept(decision=second, actor=flow.reviewer)  # never its proposer

    login(page, flow.manager)
    page.goto(f"{live_server.url}/decisions/")
    page.fill("input[type=search]", "SKIP LOCKED")
    page.click("button:has-text('Search')")
    expect(page.locator("tbody tr")).to_have_count(1)
    shoot(page, "decision-log")
    page.click(f"a:has-text('{second.key}') >> nth=0")
    expect(page.locator("h1")).to_have_text("Claim with SKIP LOCKED")
    expect(page.locator(".chain")).to_contain_text(first.key)
    shoot(page, "decision-detail")
    page.locator(".chain").get_by_text(first.key).click()
    expect(page.locator("h1")).to_have_text("Claim under a table lock")
    expect(page.locator(".badge.state-superseded").first).to_be_visible()
    expect(page.locator(".chain")).to_contain_text(second.key)


def test_the_main_pages_render_without_console_errors(page, live_server, flow, login, shoot):
    spec = flow.spec()
    flow.gates({})
    task = flow.ready(spec=spec, title="Board and spec pages")
    submitted(flow, flow.agent, PASSING_JUNIT)
    errors = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )

    login(page, flow.manager)
    for path, name in [
        ("/tasks/", "board"),
        (f"/specs/{spec.key}/", "spec"),
        ("/dashboard/", "dashboard"),
        ("/tokens/", "tokens"),
        (f"/tasks/{task.key}/", "task-page"),
    ]:
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 200, path
        shoot(page, name)

    assert errors == []


def test_the_api_docs_list_the_operations_under_the_strict_csp(page, live_server, shoot):
    paths = SchemaGenerator().get_schema(public=True)["paths"]
    console = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))

    response = page.goto(f"{live_server.url}/api/docs/")

    assert response.headers.get("content-security-policy") == CSP
    claim = page.locator(".opblock-summary-path", has_text="/api/v1/tasks/claim/")
    expect(claim).to_have_count(1)
    expect(page.locator(".opblock")).to_have_count(sum(len(methods) for methods in paths.values()))
    shoot(page, "api-docs")
    assert console == []
