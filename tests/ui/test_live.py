"""Pages that update as things happen, through the live stream (the site under ASGI)."""

import pytest
from playwright.sync_api import expect

from projects.roles import Role
from tasks import review
from tests.factories import member
from tests.ui.conftest import pytestmark as needs_chromium

pytestmark = [needs_chromium, pytest.mark.django_db(transaction=True)]


def log_in(page, server, user):
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")


def test_the_review_queue_fills_and_empties_as_submissions_and_reviews_land(
    page, asgi_server, flow, shoot
):
    flow.gates({})
    log_in(page, asgi_server, flow.reviewer)
    expect(page).to_have_url(f"{asgi_server.url}/review/")
    expect(page.locator("#queue")).to_contain_text("Nothing waits for review")
    page.wait_for_selector("#live[data-open]", state="attached")  # the stream is listening

    task, _ = flow.in_review(title="Arrives while the reviewer watches")

    expect(page.locator("#queue")).to_contain_text(task.key, timeout=10_000)
    shoot(page, "review-queue-live")
    review.task_approve(task=task, actor=flow.reviewer)
    expect(page.locator("#queue")).to_contain_text("Nothing waits for review", timeout=10_000)


def test_the_task_page_shows_the_review_verdict_as_it_lands(page, asgi_server, flow):
    flow.gates({})
    task, _ = flow.in_review(title="Watched")
    log_in(page, asgi_server, flow.manager)
    page.goto(f"{asgi_server.url}/tasks/{task.key}/")
    expect(page.locator(".page-head .badge").first).to_have_text("In Review")
    page.wait_for_selector("#live[data-open]", state="attached")

    review.task_reject(task=task, actor=flow.reviewer, reason="the queue test is skipped")

    expect(page.locator(".page-head .badge").first).to_have_text("Ready", timeout=10_000)
    expect(page.locator(".handoff")).to_contain_text("the queue test is skipped")


def test_a_half_written_reason_is_kept_and_a_notice_says_what_changed(page, asgi_server, flow):
    flow.gates({})
    task, _ = flow.in_review(title="Two reviewers")
    log_in(page, asgi_server, flow.reviewer)
    page.goto(f"{asgi_server.url}/tasks/{task.key}/")
    page.fill("#id_reason", "I was about to say")
    page.wait_for_selector("#live[data-open]", state="attached")

    review.task_approve(task=task, actor=member(flow.project, Role.REVIEWER, "rita"))

    expect(page.locator("#live")).to_contain_text(
        f"{task.key}: task approved by rita", timeout=10_000
    )
    expect(page.locator("#id_reason")).to_have_value("I was about to say")
