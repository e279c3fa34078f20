"""Review that teaches, in a real browser: a reviewer marks criteria and comments on two
diff lines (by mouse and by keyboard), rejects; the next agent's context names both lines and
the unmet criterion; a second attempt changes one of the lines and its comment shows resolved."""

import pytest
from playwright.sync_api import expect

from tasks import attempts
from tests.tasks.test_comments import FIRST, SECOND
from tests.tasks.test_criteria_verdicts import JUNIT, PNG
from tests.ui.conftest import pytestmark as needs_chromium

pytestmark = [needs_chromium, pytest.mark.django_db(transaction=True)]


def submit(flow, agent, diff, attempt=None):
    attempt = attempt or attempts.task_claim(agent=agent, project=flow.project)
    flow.attach(attempt, JUNIT, kind="junit", name="junit.xml", criteria=["AC-1"])
    flow.attach(attempt, PNG, kind="screenshot", name="queue.png", criteria=["AC-2"])
    flow.attach(attempt, diff, kind="diff", name="change.diff")
    attempts.attempt_submit(
        attempt=attempt,
        actor=agent,
        summary="s",
        change={"commit": "abc1234000000000000000000000000000000000"},
    )
    return attempt


def line(page, number):
    """The diff row showing new line ``number``."""
    return page.locator(f'table[data-commentable] tr[data-line][data-new="{number}"]')


def test_a_rejection_by_criterion_and_line_reaches_the_next_attempt(
    page, live_server, flow, login, api, shoot
):
    flow.gates({})
    task = flow.ready(
        spec=flow.spec(), title="Claims skip blocked tasks", allowed_paths=["tasks/**"]
    )
    submit(flow, flow.agent, FIRST)
    login(page, flow.reviewer)
    page.goto(f"{live_server.url}/tasks/{task.key}/")
    expect(page.locator("#to-mark")).to_contain_text("Mark before approving: AC-3")

    # By mouse: a click on line 2's number opens a comment form under it.
    line(page, 2).locator("td.ln").last.click()
    page.locator("tr.inline-form textarea").fill("this drops blocked tasks silently")
    page.locator("tr.inline-form button[type=submit]").click()
    expect(page.locator(".messages")).to_contain_text("Comment on tasks/queue.py:2 recorded.")
    # By keyboard: d enters the diff, arrows move, c opens the form, Ctrl+Enter sends it.
    page.keyboard.press("d")
    for _ in range(3):
        page.keyboard.press("ArrowDown")
    expect(line(page, 3)).to_be_focused()
    page.keyboard.press("c")
    page.keyboard.type("return None when nothing is ready")
    shoot(page, "review-commenting-by-keyboard")
    page.keyboard.press("Control+Enter")
    expect(page.locator(".messages")).to_contain_text("Comment on tasks/queue.py:3 recorded.")
    expect(page.locator("tr.inline-comment")).to_have_count(2)

    row = page.locator("#criterion-AC-3")
    row.get_by_label("not met").check()
    row.locator("input[name='note:AC-3']").fill("names do not say what they hold")
    shoot(page, "review-criteria-marked")
    page.click("button.reject")
    expect(page.locator(".messages")).to_contain_text(f"{task.key} rejected.")

    second = attempts.task_claim(agent=flow.agent2, project=flow.project)
    agent = api(flow.agent2)
    bundle = agent.get(f"/api/v1/tasks/{task.key}/context/").json()
    markdown = agent.get(f"/api/v1/tasks/{task.key}/context/?format=markdown").content.decode()
    [earlier] = bundle["attempts"]
    assert [(c["path"], c["line"], c["text"]) for c in earlier["comments"]] == [
        ("tasks/queue.py", 2, "this drops blocked tasks silently"),
        ("tasks/queue.py", 3, "return None when nothing is ready"),
    ]
    assert earlier["criteria"][0] == {
        "key": "AC-3",
        "verdict": "not_met",
        "note": "names do not say what they hold",
        "by": "reviewer",
    }
    assert "- [ ] AC-3 NOT MET — names do not say what they hold" in markdown
    assert "- [ ] `tasks/queue.py:2` this drops blocked tasks silently" in markdown
    assert "- [ ] `tasks/queue.py:3` return None when nothing is ready" in markdown

    submit(flow, flow.agent2, SECOND, second)  # changes line 3, keeps line 2
    page.goto(f"{live_server.url}/tasks/{task.key}/?attempt=1")
    resolved = page.locator("tr.inline-comment.resolved")
    expect(resolved).to_have_count(1)
    expect(resolved).to_contain_text("return None when nothing is ready")
    expect(page.locator("tr.inline-comment:not(.resolved)")).to_contain_text("drops blocked")
    shoot(page, "review-first-attempt-after-the-second")
