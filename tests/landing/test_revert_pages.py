"""Reverts on the pages: the task page's forms that revert a landed change and take a queued
revert back, and the landing page's Reverts panel (its fast lane and its cancel), each
saying what happened or why not."""

from landing.services import revert_request
from tests.landing.test_revert import landed, state_of


def test_the_task_page_offers_a_manager_the_revert_form(client, lands):
    task, _ = landed(lands)

    client.force_login(lands.manager)
    page = client.get(f"/tasks/{task.key}/").content.decode()
    client.force_login(lands.reviewer)
    theirs = client.get(f"/tasks/{task.key}/").content.decode()

    assert f'action="/projects/FM/landing/{task.key}/revert/"' in page
    assert 'name="csrfmiddlewaretoken"' in page
    assert f'action="/projects/FM/landing/{task.key}/revert/"' not in theirs


def test_the_revert_form_queues_the_revert_and_shows_it(client, lands):
    task, attempt = landed(lands)
    client.force_login(lands.manager)

    answer = client.post(
        f"/projects/FM/landing/{task.key}/revert/", {"reason": "wrong fix"}, follow=True
    )

    page = answer.content.decode()
    assert answer.redirect_chain == [(f"/tasks/{task.key}/", 302)]
    assert f"The revert of {task.key} is queued" in page
    assert "revert queued" in page
    assert f'action="/projects/FM/landing/{task.key}/revert/"' not in page
    attempt.refresh_from_db()
    assert attempt.landing["revert"]["reason"] == "wrong fix"


def test_the_revert_form_says_why_it_was_refused(client, lands):
    task, _ = landed(lands)
    client.force_login(lands.manager)
    before = state_of(task)

    answer = client.post(f"/projects/FM/landing/{task.key}/revert/", {"reason": ""}, follow=True)

    assert f"{task.key} was not reverted" in answer.content.decode()
    assert state_of(task) == before


def test_the_task_page_offers_a_manager_the_cancel_form_beside_a_queued_revert(client, lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    cancel = f'action="/projects/FM/landing/{task.key}/revert/cancel/"'

    client.force_login(lands.reviewer)
    theirs = client.get(f"/tasks/{task.key}/").content.decode()
    client.force_login(lands.manager)
    page = client.get(f"/tasks/{task.key}/").content.decode()
    answer = client.post(
        f"/projects/FM/landing/{task.key}/revert/cancel/", {"reason": "a false alarm"}, follow=True
    )

    assert cancel in page and cancel not in theirs
    assert f'aria-label="Why cancel the revert of {task.key}"' in page
    after = answer.content.decode()
    assert answer.redirect_chain == [(f"/tasks/{task.key}/", 302)]
    assert f"The revert of {task.key} is cancelled" in after
    assert "revert cancelled" in after and "a false alarm" in after
    assert cancel not in after
    assert f'action="/projects/FM/landing/{task.key}/revert/"' in after  # it can be asked again
    attempt.refresh_from_db()
    assert attempt.revert_at is None


def test_the_cancel_form_says_why_it_was_refused(client, lands):
    task, _ = landed(lands)
    client.force_login(lands.manager)
    before = state_of(task)

    answer = client.post(
        f"/projects/FM/landing/{task.key}/revert/cancel/", {"reason": "oops"}, follow=True
    )

    page = answer.content.decode()
    assert f"The revert of {task.key} was not cancelled: no revert of {task.key} is queued" in page
    assert state_of(task) == before


def test_the_landing_page_offers_a_manager_the_fast_lane_for_a_queued_revert(client, lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    client.force_login(lands.manager)

    answer = client.post(
        f"/projects/FM/landing/{task.key}/fast/", {"reason": "the incident"}, follow=True
    )

    page = answer.content.decode()
    assert f'data-revert-row="{task.key}"' in page
    assert "fast lane" in page
    assert f'action="/projects/FM/landing/{task.key}/fast/"' not in page  # in it already
    attempt.refresh_from_db()
    assert attempt.fast_at is not None


def test_the_landing_pages_reverts_panel_offers_a_manager_the_cancel_and_returns_there(
    client, lands
):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    cancel = f'action="/projects/FM/landing/{task.key}/revert/cancel/"'

    client.force_login(lands.reviewer)
    theirs = client.get("/projects/FM/landing/").content.decode()
    client.force_login(lands.manager)
    page = client.get("/projects/FM/landing/").content.decode()
    answer = client.post(
        f"/projects/FM/landing/{task.key}/revert/cancel/",
        {"reason": "a false alarm", "back": "landing"},
        follow=True,
    )

    assert cancel in page and cancel not in theirs
    assert f'data-revert-row="{task.key}"' in page
    assert answer.redirect_chain == [("/projects/FM/landing/#reverts", 302)]
    after = answer.content.decode()
    assert f"The revert of {task.key} is cancelled" in after
    assert f'data-revert-row="{task.key}"' not in after
    attempt.refresh_from_db()
    assert attempt.revert_at is None
    assert (attempt.landing["revert"]["state"], task.state) == ("cancelled", "done")


def test_a_refused_cancel_from_the_landing_page_says_why_there(client, lands):
    task, _ = landed(lands)
    client.force_login(lands.manager)
    before = state_of(task)

    answer = client.post(
        f"/projects/FM/landing/{task.key}/revert/cancel/",
        {"reason": "oops", "back": "landing"},
        follow=True,
    )

    assert answer.redirect_chain == [("/projects/FM/landing/#reverts", 302)]
    page = answer.content.decode()
    assert f"The revert of {task.key} was not cancelled: no revert of {task.key} is queued" in page
    assert state_of(task) == before
