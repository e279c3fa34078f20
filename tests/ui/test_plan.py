"""A manager reads the plan in a real browser (Chromium) and follows a task from the graph."""

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tasks.models import Attempt
from tests.ui.conftest import pytestmark as needs_chromium

pytestmark = [needs_chromium, pytest.mark.django_db(transaction=True)]

NOTES = Path("/work/notes")


def history(flow):
    """Three tasks done, their first attempts started hours before."""
    for title, labels, hours in [
        ("Lease table", ["api"], 3),
        ("Claim endpoint", ["api"], 5),
        ("Board page", ["ui"], 8),
    ]:
        _, attempt = flow.done(title=title, labels=labels)
        Attempt.objects.filter(pk=attempt.pk).update(
            started_at=timezone.now() - timedelta(hours=hours)
        )


def test_a_manager_reads_the_plan_and_follows_a_task(page, live_server, flow, login, tmp_path):
    flow.gates({})
    history(flow)
    flow.in_review(title="Budget schema", labels=["api"])
    flow.claimed(title="Usage on heartbeat", labels=["api"])
    flow.blocked(title="Provider price table")
    schema = flow.ready(title="Budget fields on projects", labels=["api"])
    api = flow.ready(title="Claim refuses past budget", labels=["api"], depends_on=[schema])
    page_task = flow.ready(title="Costs page for managers", labels=["ui"], depends_on=[api])
    flow.draft(title="Cost report export", depends_on=[api])
    flow.draft(title="Docs: budgets", depends_on=[page_task])
    flow.ready(title="Tidy the admin")

    login(page, flow.manager)
    page.goto(f"{live_server.url}/projects/FM/plan/")
    expect(page.locator("h1")).to_have_text("Plan of FM")
    expect(page.locator("#critical-path li")).to_have_count(4)
    expect(page.locator("#forecast-p50")).not_to_be_empty()
    shot = tmp_path / "plan.png"
    page.screenshot(path=str(shot), full_page=True)
    if NOTES.is_dir():
        shutil.copy(shot, NOTES / "plan.png")

    page.locator(f"a.node[data-key='{api.key}']").focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/tasks/{api.key}/")
    expect(page.locator("h1")).to_have_text("Claim refuses past budget")
    page.go_back()
    page.click(f"a.node[data-key='{page_task.key}']")
    expect(page).to_have_url(f"{live_server.url}/tasks/{page_task.key}/")
