"""The merge queue's pages: a project's landing page and the task page's Landing panel.

State is built with the real services and Batch rows; one test runs the lander on a real
origin (tests/landing/conftest.py) and reads what it did back through the pages.
"""

import re

import pytest
from django.test import Client

from landing.lander import land
from landing.models import Batch, BatchState
from landing.services import landing_fast
from projects.models import Event
from tasks.landing import attempt_landing_note, task_land, task_landing_return
from tests.landing.conftest import backing_off, feature, lander_snapshot, queued, snapshot

pytestmark = pytest.mark.django_db

HUNK = "<<<<<<< ours\ndef add(a, b):\n=======\ndef add(x, y):\n>>>>>>> theirs\n"


def page(client, user, path="/projects/FM/landing/"):
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def dequeue_forms(html: str) -> list[str]:
    return re.findall(r'action="(/projects/FM/landing/[^"]+/dequeue/)"', html)


def test_the_page_shows_the_settings_the_queue_in_order_and_the_batches(client, lands):
    first, one = queued(lands, "First")
    second, _ = queued(lands, "Second")
    attempt_landing_note(attempt=one, state="landing", batch=5)
    Batch.objects.create(
        project=lands.project,
        state=BatchState.RETURNED,
        target="main",
        method="squash",
        changes=[{"attempt": 9, "task": first.key, "outcome": "conflict", "reason": "in calc.py"}],
        verify_runs=2,
        bisect_steps=1,
        seconds=2.5,
        reason="",
    )

    html = page(client, lands.agent)

    assert "push" in html and "squash, up to 4 changes a batch" in html
    rows = re.findall(r'data-queue-row="([^"]+)"', html)
    assert rows == [first.key, second.key]
    assert f'href="/tasks/{first.key}/"' in html
    assert (
        html.count(
            '<td class="mono" title="abc1230000000000000000000000000000000000">abc123000000</td>'
        )
        == 2
    )
    assert (
        '<span class="badge state-landing">landing</span> <span class="small muted">batch 5' in html
    )
    assert '<span class="badge state-conflict">conflict</span>' in html
    assert "in calc.py" in html and '<td class="num">2.5</td>' in html
    assert dequeue_forms(html) == []  # an agent has no form


def test_managers_get_a_dequeue_form_per_queued_row(client, lands):
    first, _ = queued(lands, "First")
    second, _ = queued(lands, "Second")

    html = page(client, lands.manager)

    assert dequeue_forms(html) == [
        f"/projects/FM/landing/{first.key}/dequeue/",
        f"/projects/FM/landing/{second.key}/dequeue/",
    ]
    assert html.count('name="csrfmiddlewaretoken"') >= 2
    # Each row's dequeue and fast-lane reasons, the pause form's and the quarantine form's.
    assert html.count('name="reason" required') == 6


def test_the_page_counts_the_changes_landed_in_the_last_hour(client, lands):
    _, one = queued(lands)
    task_land(attempt=one, commit="c" * 40, batch=None, seconds=1.0)

    html = page(client, lands.reviewer)

    assert '<div class="stat" id="landed-per-hour">1</div>' in html
    assert '<div class="stat" id="queued">0</div>' in html
    assert "Nothing waits to land." in html


def test_a_manager_dequeues_from_the_page(client, lands):
    task, _ = queued(lands)
    client.force_login(lands.manager)

    response = client.post(
        f"/projects/FM/landing/{task.key}/dequeue/",
        {"to": "in_review", "reason": "review it again"},
        follow=True,
    )

    assert response.redirect_chain == [("/projects/FM/landing/", 302)]
    assert f"{task.key} taken out of the landing queue: it is in_review now." in (
        response.content.decode()
    )
    task.refresh_from_db()
    assert task.state == "in_review"


def test_a_dequeue_without_a_reason_says_why_and_changes_nothing(client, lands):
    task, _ = queued(lands)
    before = snapshot(task)
    client.force_login(lands.manager)

    response = client.post(
        f"/projects/FM/landing/{task.key}/dequeue/", {"to": "ready", "reason": " "}, follow=True
    )

    assert response.redirect_chain == [("/projects/FM/landing/", 302)]
    assert "not taken out of the queue: say why the task leaves the landing queue" in (
        response.content.decode()
    )
    assert snapshot(task) == before


def test_a_reviewer_cannot_dequeue_from_the_page(client, lands):
    task, _ = queued(lands)
    before = snapshot(task)
    client.force_login(lands.reviewer)

    response = client.post(
        f"/projects/FM/landing/{task.key}/dequeue/", {"to": "ready", "reason": "r"}, follow=True
    )

    assert f"{task.key} not taken out of the queue" in response.content.decode()
    assert snapshot(task) == before


@pytest.mark.parametrize("reason", ["x" * 10_001, "a\x00b"], ids=["too long", "nul"])
def test_a_reviewer_is_refused_for_the_role_before_the_reason_is_read(client, lands, reason):
    # Authorize, then validate: a refusal never tells the caller how its input was wrong.
    task, _ = queued(lands)
    before = snapshot(task)
    client.force_login(lands.reviewer)

    response = client.post(
        f"/projects/FM/landing/{task.key}/dequeue/", {"to": "ready", "reason": reason}, follow=True
    )

    [message] = [str(m) for m in response.context["messages"]]
    assert (
        message
        == f"{task.key} not taken out of the queue: this needs the manager role in the project"
    )
    assert snapshot(task) == before


@pytest.mark.parametrize(
    ("reason", "why"),
    [
        ("x" * 10_001, "at most 10000 characters"),
        ("a\x00b", "text may not contain NUL characters"),
    ],
    ids=["too long", "nul"],
)
def test_a_managers_unreadable_reason_says_why_and_changes_nothing(client, lands, reason, why):
    task, _ = queued(lands)
    before = snapshot(task)
    client.force_login(lands.manager)

    response = client.post(
        f"/projects/FM/landing/{task.key}/dequeue/", {"to": "ready", "reason": reason}, follow=True
    )

    [message] = [str(m) for m in response.context["messages"]]
    assert message == f"{task.key} not taken out of the queue: {why}"
    assert snapshot(task) == before


def test_a_dequeue_submitted_twice_takes_the_task_out_once(client, lands):
    task, _ = queued(lands)
    client.force_login(lands.manager)
    path = f"/projects/FM/landing/{task.key}/dequeue/"

    client.post(path, {"to": "ready", "reason": "not now"})
    after_first = snapshot(task)
    again = client.post(path, {"to": "ready", "reason": "not now"}, follow=True)

    message = [str(m) for m in again.context["messages"]][-1]
    assert message.startswith(f"{task.key} not taken out of the queue: ")
    assert snapshot(task) == after_first


def test_a_dequeue_posted_from_another_site_is_refused_without_its_csrf_token(lands):
    task, _ = queued(lands)
    before = snapshot(task)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(lands.manager)

    response = browser.post(
        f"/projects/FM/landing/{task.key}/dequeue/", {"to": "ready", "reason": "forged"}
    )

    assert response.status_code == 403
    assert snapshot(task) == before


def test_outsiders_find_no_landing_page(client, lands, other_flow):
    task, _ = queued(lands)
    before = snapshot(task)
    client.force_login(other_flow.manager)

    assert client.get("/projects/FM/landing/").status_code == 404
    answer = client.post(
        f"/projects/FM/landing/{task.key}/dequeue/", {"to": "ready", "reason": "r"}
    )

    assert answer.status_code == 404
    assert snapshot(task) == before


def test_the_navigation_links_the_landing_pages(client, lands, other_flow):
    html = page(client, lands.agent, "/tasks/")

    assert 'href="/landing/"' in html
    client.force_login(lands.agent)
    assert client.get("/landing/").url == "/projects/FM/landing/"  # one project: straight there


def queries_for(client, path, assert_max) -> int:
    client.get(path)  # warms the per-process caches first
    with assert_max(20) as captured:
        assert client.get(path).status_code == 200
    return len(captured.captured_queries)


def test_the_page_query_count_does_not_grow_with_the_queue(
    client, lands, django_assert_max_num_queries
):
    queued(lands)
    Batch.objects.create(project=lands.project, target="main", method="squash")
    client.force_login(lands.manager)
    one = queries_for(client, "/projects/FM/landing/", django_assert_max_num_queries)
    for n in range(8):
        queued(lands, f"Change {n}")
        Batch.objects.create(project=lands.project, target="main", method="squash")

    many = queries_for(client, "/projects/FM/landing/", django_assert_max_num_queries)

    assert many == one


# --- The task page's Landing panel -----------------------------------------------------------


def panel(html: str) -> str:
    found = re.search(
        r'<section class="panel" aria-label="Landing" id="landing">.*?</section>', html, re.S
    )
    assert found, "no Landing panel"
    return found.group(0)


def test_a_queued_task_shows_its_place_and_its_batch_partners(client, lands):
    first, one = queued(lands, "First")
    second, two = queued(lands, "Second")
    attempt_landing_note(attempt=one, state="landing", batch=4)
    attempt_landing_note(attempt=two, state="landing", batch=4)

    shown = panel(page(client, lands.agent, f"/tasks/{second.key}/"))

    assert '<span class="badge state-landing">landing</span>' in shown
    assert "position 2 in the queue" in shown
    assert "batch 4" in shown
    assert f'href="/tasks/{first.key}/" class="mono">{first.key}</a> First' in shown
    assert second.key not in re.sub(r"/tasks/[^/]+/", "", shown.split("Batch partners")[1])


def test_the_task_page_counts_the_fast_lane_ahead_as_the_landing_page_does(client, lands):
    first, _ = queued(lands, "First")
    second, _ = queued(lands, "Second")
    hotfix, _ = queued(lands, "Hotfix")
    landing_fast(task=hotfix, actor=lands.manager, reason="the outage")

    places = {
        task.key: panel(page(client, lands.agent, f"/tasks/{task.key}/"))
        for task in (first, second, hotfix)
    }
    queue = page(client, lands.agent, "/projects/FM/landing/")

    assert "position 1 in the queue" in places[hotfix.key]
    assert "position 2 in the queue" in places[first.key]
    assert "position 3 in the queue" in places[second.key]
    rows = re.findall(r'data-queue-row="([^"]+)"', queue)
    assert rows == [hotfix.key, first.key, second.key]


def test_a_landed_task_says_where_it_landed(client, lands):
    task, attempt = queued(lands)
    task_land(attempt=attempt, commit="d" * 40, batch=2, seconds=3.0)

    shown = panel(page(client, lands.agent, f"/tasks/{task.key}/"))

    assert f'Landed at <code title="{"d" * 40}">{"d" * 12}</code>.' in shown
    assert "position" not in shown


def test_a_conflict_shows_why_with_its_paths_and_hunks(client, lands):
    task, attempt = queued(lands)
    task_landing_return(
        attempt=attempt,
        state="conflict",
        reason="landing failed: conflict in calc.py with FM-9",
        details={"paths": ["calc.py"], "hunks": [{"path": "calc.py", "text": HUNK}]},
    )

    shown = panel(page(client, lands.agent, f"/tasks/{task.key}/"))

    assert "landing failed: conflict in calc.py with FM-9" in shown
    assert "Conflicting paths: <code>calc.py</code>" in shown
    assert '<pre class="mono">&lt;&lt;&lt;&lt;&lt;&lt;&lt; ours\ndef add(a, b):' in shown


def test_failing_tests_once_merged_are_listed(client, lands):
    task, attempt = queued(lands)
    task_landing_return(
        attempt=attempt,
        state="failed",
        reason="landing failed: fails on main",
        details={"failing": ["CalcTest::test_add"], "with": ["FM-1"]},
    )

    shown = panel(page(client, lands.agent, f"/tasks/{task.key}/"))

    assert '<li class="small mono">CalcTest::test_add</li>' in shown
    assert "Merged with FM-1." in shown


def test_a_task_that_never_queued_has_no_landing_panel(client, lands):
    task, _ = lands.in_review()

    html = page(client, lands.agent, f"/tasks/{task.key}/")

    assert 'aria-label="Landing"' not in html


def test_the_landing_panel_costs_a_bounded_number_of_queries(
    client, lands, django_assert_max_num_queries
):
    task, attempt = queued(lands, "Mine")
    attempt_landing_note(attempt=attempt, state="landing", batch=1)
    client.force_login(lands.agent)
    path = f"/tasks/{task.key}/"
    client.get(path)
    with django_assert_max_num_queries(60) as one:
        client.get(path)
    for n in range(8):
        _, other = queued(lands, f"Partner {n}")
        attempt_landing_note(attempt=other, state="landing", batch=1)

    with django_assert_max_num_queries(60) as many:
        html = client.get(path).content.decode()

    assert len(many.captured_queries) == len(one.captured_queries)
    assert panel(html).count('class="mono">FM-') == 8


# --- On a real origin ------------------------------------------------------------------------


def test_what_the_lander_did_shows_on_the_pages(client, queue, origin, flow):
    first, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    second, _ = queue.approved(feature("beta"), branch="beta", title="Add beta")

    land(flow.project)

    html = page(client, flow.manager)
    batch = Batch.objects.get()
    assert batch.state == BatchState.LANDED
    assert f'data-batch="{batch.pk}"' in html
    # The batch, and each of its two changes.
    assert html.count('<span class="badge state-landed">landed</span>') == 3
    assert '<div class="stat" id="landed-per-hour">2</div>' in html
    assert Event.objects.filter(transition="land").count() == 2
    second.refresh_from_db()
    shown = panel(page(client, flow.manager, f"/tasks/{second.key}/"))
    assert f'Landed at <code title="{origin.tip()}">{origin.tip()[:12]}</code>.' in shown
    assert f'href="/tasks/{first.key}/"' in shown  # its batch partner


def test_the_live_refresh_gets_the_queue_and_batches_alone(client, lands):
    task, _ = queued(lands)
    client.force_login(lands.agent)

    html = client.get("/projects/FM/landing/", HTTP_HX_REQUEST="true").content.decode()

    assert html.startswith('<div id="landing">')
    assert f'data-queue-row="{task.key}"' in html and "<html" not in html


# --- The lander's back-off -------------------------------------------------------------------


def retry_forms(html: str) -> list[str]:
    return re.findall(r'action="(/projects/FM/landing/retry/)"', html)


def test_the_page_says_why_and_since_when_the_lander_backs_off(client, lands):
    task, attempt = queued(lands)
    backing_off(lands, attempt)

    html = page(client, lands.reviewer)

    assert '<h2 id="lander-head">The lander is backing off' in html
    assert '<p class="notice">nothing landed: the target itself fails its tests</p>' in html
    assert f'<span class="mono" title="{"a" * 40}">{"a" * 12}</span>' in html
    assert f'href="/tasks/{task.key}/" class="mono">{task.key}</a> first in the queue' in html
    assert "It verifies nothing again until the target's tip or the queue's head changes" in html
    assert retry_forms(html) == []  # a reviewer has no button
    assert retry_forms(page(client, lands.manager)) == ["/projects/FM/landing/retry/"]


def test_a_ready_lander_takes_no_room_on_the_page(client, lands):
    queued(lands)

    html = page(client, lands.manager)

    assert 'id="lander"' not in html and retry_forms(html) == []


def test_a_manager_wakes_the_lander_from_the_page(client, lands):
    _, attempt = queued(lands)
    backing_off(lands, attempt)
    client.force_login(lands.manager)

    response = client.post("/projects/FM/landing/retry/", {"reason": "fixed"}, follow=True)

    assert response.redirect_chain == [("/projects/FM/landing/", 302)]
    assert "The lander was woken: it verifies the queue once more now." in (
        response.content.decode()
    )
    assert Event.objects.get(transition="retry").reason == "fixed"


def test_a_reviewer_cannot_wake_the_lander_from_the_page(client, lands):
    _, attempt = queued(lands)
    backing_off(lands, attempt)
    before = lander_snapshot(lands.project)
    client.force_login(lands.reviewer)

    response = client.post("/projects/FM/landing/retry/", {"reason": "mine"}, follow=True)

    assert "The lander was not woken: this needs the manager role in the project" in (
        response.content.decode()
    )
    assert lander_snapshot(lands.project) == before
