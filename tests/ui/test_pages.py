"""Pages everyone can use, in a real browser: every page in the states of a bad day, for each
role that sees it, passes axe-core and fits 360 pixels (the checks run on every load, in
tests/ui/conftest.py), and a reviewer does the whole review with the keyboard alone."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from events import services as events
from landing.models import FlakyTest
from landing.services import landing_fast, landing_pause, landing_quarantine, revert_request
from projects.models import Project
from projects.roles import Role
from tasks import attempts, review
from tasks.landing import task_land, task_landing_return
from tests.factories import ProjectFactory, member
from tests.tasks.test_comments import FIRST
from tests.tasks.test_criteria_verdicts import JUNIT
from tests.ui.a11y import PageChecker
from tests.ui.conftest import pytestmark as needs_chromium

pytestmark = [needs_chromium, pytest.mark.django_db(transaction=True)]

LANDING = {"mode": "push", "method": "squash", "batch_max": 4, "target_branch": ""}
FAILING_JUNIT = (
    b"<testsuite tests='1'><testcase classname='tests.test_claim' name='test_skip_deps'>"
    b"<failure message='assert FM-2 == FM-3'>dependencies were ignored</failure>"
    b"</testcase></testsuite>"
)

# What the focused element shows: a ring (an outline or a box shadow) or nothing.
FOCUS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const s = getComputedStyle(el);
  const ring = (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) >= 2)
    || s.boxShadow !== "none";
  return {ring: ring, tag: el.tagName.toLowerCase(), href: el.getAttribute("href"),
          name: el.getAttribute("name"), text: (el.textContent || el.value || "").trim().slice(0, 60)};
}"""


def log_in(page, server, user):
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")


def focused(page):
    """The focused element, asserting that its focus is drawn."""
    now = page.evaluate(FOCUS)
    assert now is not None, f"focus was lost to the page at {page.url}"
    assert now["ring"], f"no visible focus on {now}"
    return now


def tab_to(page, selector, limit=80):
    """Tab until ``selector`` has focus; every element on the way shows its focus."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused(page)
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} is not reached by Tab")


def a_bad_day(flow):
    """Landing paused with a change returned, a gate failed, a change in review."""
    Project.objects.filter(pk=flow.project.pk).update(landing=LANDING)
    flow.project.refresh_from_db()
    flow.gates({})
    # A change in the fast lane, another behind it; a flaky test and a quarantined one.
    flow.done(title="Queued behind")
    fast, _ = flow.done(title="The outage fix")
    landing_fast(task=fast, actor=flow.manager, reason="the outage fix", alone=True)
    seen = timezone.now()
    FlakyTest.objects.create(
        project=flow.project, test="tests/test_claim.py::ClaimTest::test_order", flakes=2,
        trees=["a" * 40], first_seen=seen, last_seen=seen,
    )  # fmt: skip
    landing_quarantine(
        project=flow.project,
        actor=flow.manager,
        test="tests/test_clock.py::ClockTest::test_leap_day",
        quarantined=True,
        reason="fails on leap days; FM-99 fixes it",
    )
    # A landed change a manager reverts: its revert waits in the Reverts panel.
    reverted, landed = flow.done(title="Landed, then reverted")
    task_land(attempt=landed, commit="d" * 40, batch=None, seconds=1.0)
    revert_request(task=reverted, actor=flow.manager, reason="it broke the nightly build")
    spec = flow.spec()
    returned, attempt = flow.done(title="Returned from landing", spec=spec)
    attempt.refresh_from_db()
    task_landing_return(
        attempt=attempt,
        state="conflict",
        reason="landing failed: conflict in calc.py with FM-9",
        details={"paths": ["calc.py"], "hunks": [{"path": "calc.py", "text": "<<<<<<< ours\n"}]},
    )
    landing_pause(project=flow.project, actor=flow.manager, reason="main is red")
    flow.gates({"tests-pass": {}})
    gate_failed, claim = flow.claimed(title="Its tests fail", max_attempts=1, priority=5)
    flow.attach(claim, FAILING_JUNIT, kind="junit", name="junit.xml")
    attempts.attempt_submit(
        attempt=claim,
        actor=flow.agent,
        summary="s",
        change={"commit": "abc1234000000000000000000000000000000000"},
    )
    flow.gates({})
    # Above the returned task, which is ready again: the claim takes this one.
    in_review, _ = flow.in_review(title="Waits for a reviewer", priority=10)
    hook = events.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )
    return {
        "returned": returned,
        "in_review": in_review,
        "gate_failed": gate_failed,
        "spec": spec,
        "hook": hook,
        "reverted": reverted,
    }


def test_a_manager_reads_every_page_on_a_bad_day(page, live_server, flow, login, settings):
    day = a_bad_day(flow)
    settings.FACTORY_WEBHOOK_ALLOW_PRIVATE = False  # as in production: a form with errors
    member(ProjectFactory(slug="OT"), Role.MANAGER, flow.manager.username)  # the index pages
    login(page, flow.manager)

    for path in [
        "/tasks/",
        "/dashboard/",
        "/plan/",
        "/landing/",
        "/projects/FM/landing/",
        f"/tasks/{day['returned'].key}/",
        f"/tasks/{day['gate_failed'].key}/",
        f"/tasks/{day['in_review'].key}/",
        f"/tasks/{day['reverted'].key}/",
        f"/specs/{day['spec'].key}/",
        "/tokens/",
        "/webhooks/",
        "/imports/",
        f"/projects/FM/webhooks/{day['hook'].pk}/",
        "/projects/FM/webhooks/",
    ]:
        assert page.goto(f"{live_server.url}{path}").status == 200, path
    expect(page.locator("h1")).to_contain_text("Webhooks")
    page.fill("#id_url", "http://10.0.0.8/")
    page.click("button:has-text('Subscribe')")
    expect(page.locator(".errorlist")).to_contain_text("inside the network")
    page.goto(f"{live_server.url}/projects/FM/landing/")
    expect(page.locator("#landing")).to_contain_text("main is red")
    expect(page.locator("#reverts")).to_contain_text("Cancel the revert")


def test_an_agent_reads_its_work_and_a_returned_landing(page, live_server, flow, login):
    day = a_bad_day(flow)
    login(page, flow.agent)

    page.goto(f"{live_server.url}/tasks/{day['returned'].key}/")
    expect(page.locator("#landing")).to_contain_text("conflict in calc.py")
    page.goto(f"{live_server.url}/tasks/{day['gate_failed'].key}/")
    expect(page.locator(".page-head")).to_contain_text(day["gate_failed"].key)
    page.goto(f"{live_server.url}/projects/FM/landing/")
    expect(page.locator("#landing")).to_contain_text("main is red")
    expect(page.locator("#reverts")).to_contain_text("it broke the nightly build")
    expect(page.locator("#reverts")).not_to_contain_text("Cancel the revert")


def test_a_visitor_logs_in_after_a_wrong_password(page, live_server, flow):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", flow.reviewer.username)
    page.fill("#id_password", "not the password")
    page.click("button[type=submit]")
    expect(page.locator(".notice")).to_contain_text("didn't match")

    page.fill("#id_username", flow.reviewer.username)
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")

    expect(page).to_have_url(f"{live_server.url}/review/")


def submitted(flow, agent, diff, title):
    task = flow.ready(spec=flow.spec(), title=title, allowed_paths=["tasks/**"])
    attempt = attempts.task_claim(agent=agent, project=flow.project)
    flow.attach(attempt, JUNIT, kind="junit", name="junit.xml", criteria=["AC-1"])
    flow.attach(attempt, diff, kind="diff", name="change.diff")
    attempts.attempt_submit(
        attempt=attempt,
        actor=agent,
        summary="s",
        change={"commit": "abc1234000000000000000000000000000000000"},
    )
    return task


def test_a_reviewer_walks_the_review_by_keyboard_alone(page, asgi_server, flow):
    flow.gates({})
    first = submitted(flow, flow.agent, FIRST, "Claims skip blocked tasks")
    log_in(page, asgi_server, flow.reviewer)
    expect(page).to_have_url(f"{asgi_server.url}/review/")
    page.wait_for_selector("#live[data-open]", state="attached")

    # The queue: Tab to the task; a live update refills the queue and focus stays on it.
    tab_to(page, f"#queue a[href='/tasks/{first.key}/']")
    second, _ = flow.in_review(title="Arrives while the reviewer reads")
    expect(page.locator("#queue")).to_contain_text(second.key, timeout=10_000)
    assert focused(page)["href"] == f"/tasks/{first.key}/"
    page.keyboard.press("Enter")
    expect(page.locator("h1")).to_have_text("Claims skip blocked tasks")

    # The evidence: Tab to the JUnit report's link, read it, come back.
    tab_to(page, "a[href^='/evidence/']")
    page.keyboard.press("Enter")
    expect(page.locator("h1")).to_contain_text("junit.xml")
    page.go_back()

    # A line comment: d enters the diff, arrows move, c opens the form, Ctrl+Enter sends.
    page.keyboard.press("d")
    for _ in range(3):
        page.keyboard.press("ArrowDown")
    focused(page)
    page.keyboard.press("c")
    page.keyboard.type("return None when nothing is ready")
    page.keyboard.press("Control+Enter")
    expect(page.locator(".messages")).to_contain_text("Comment on tasks/queue.py:3 recorded.")

    # Rejecting with nothing said is refused and says why (a form with errors).
    tab_to(page, "button.reject")
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("reason")

    # A verdict per criterion: Tab into AC-3's radios, an arrow picks "not met", a note.
    tab_to(page, "input[name='criterion:AC-3']")
    page.keyboard.press("ArrowDown")
    expect(page.locator("#criterion-AC-3").get_by_label("not met")).to_be_checked()
    page.keyboard.press("Tab")
    assert focused(page)["name"] == "note:AC-3"
    page.keyboard.type("names do not say what they hold")
    tab_to(page, "button.reject")
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text(f"{first.key} rejected.")

    # Approve the other one, from the top bar's Review link.
    tab_to(page, "header a[href='/review/']")
    page.keyboard.press("Enter")
    expect(page.locator("h1")).to_have_text("Review queue")
    tab_to(page, f"#queue a[href='/tasks/{second.key}/']")
    page.keyboard.press("Enter")
    expect(page.locator("h1")).to_have_text("Arrives while the reviewer reads")
    tab_to(page, "button.approve")
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text(f"{second.key} approved.")


def test_the_check_fails_naming_the_rule_and_the_element(context, live_server):
    page = context.new_page()  # not the checked page fixture: this one is meant to fail
    checker = PageChecker(page)
    page.route(
        f"{live_server.url}/tasks/",
        lambda route: route.fulfill(
            content_type="text/html",
            body='<!doctype html><html lang="en"><title>t</title><main>'
            '<p style="color:#bbb;background:#fff">pale</p></main></html>',
        ),
    )
    page.goto(f"{live_server.url}/tasks/")

    with pytest.raises(AssertionError) as failure:
        checker.check()

    assert "color-contrast" in str(failure.value)
    assert "<p" in str(failure.value) and "task-board" in str(failure.value)
    assert checker.checked == ["task-board"]


@pytest.mark.parametrize(
    ("wrapper", "fails"),
    [("overflow-x:auto", False), ("overflow:hidden", True), ("", True)],
)
def test_only_a_container_that_scrolls_by_itself_may_hold_something_wider(
    context, live_server, wrapper, fails
):
    page = context.new_page()
    checker = PageChecker(page)
    page.route(
        f"{live_server.url}/tasks/",
        lambda route: route.fulfill(
            content_type="text/html",
            body='<!doctype html><html lang="en"><title>t</title><main>'
            f'<div style="{wrapper}" tabindex="0" aria-label="wide">'
            '<table><tr><td style="min-width:900px">wide</td></tr></table></div>'
            "</main></html>",
        ),
    )
    page.goto(f"{live_server.url}/tasks/")

    if fails:
        with pytest.raises(AssertionError, match=r"past the right edge: .*td"):
            checker.check()
    else:
        checker.check()
    assert checker.checked == ["task-board"]
    assert page.viewport_size == {"width": 1400, "height": 900}


def test_a_reload_by_the_live_stream_keeps_the_focus(page, asgi_server, flow):
    flow.gates({})
    task, _ = flow.in_review(title="Watched")
    log_in(page, asgi_server, flow.manager)
    page.goto(f"{asgi_server.url}/tasks/{task.key}/")
    page.wait_for_selector("#live[data-open]", state="attached")
    tab_to(page, "nav[aria-label=Attempts] a")  # nothing typed: the page may reload

    review.task_reject(task=task, actor=flow.reviewer, reason="the queue test is skipped")

    expect(page.locator(".page-head .badge").first).to_have_text("Ready", timeout=10_000)
    expect(page.locator("nav[aria-label=Attempts] a")).to_be_focused()
    assert focused(page)["href"] == "?attempt=1"
