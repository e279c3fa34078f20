"""The fast lane (issue 34, item 2; docs/landing.md, "The fast lane"): a manager puts a
queued change first, alone if asked; it is verified like every change."""

import pytest

from events.payloads import envelope
from events.types import type_of
from landing.lander import batch_of, land
from landing.models import Batch
from landing.services import landing_fast, landing_pause, landing_quarantine
from projects.errors import Conflict, PermissionDenied
from projects.models import Event
from tasks.landing import attempt_landing_note, landing_queue, task_dequeue
from tests.landing.conftest import broken, feature, queued, snapshot

URL = "/api/v1/projects/FM/landing/{}/fast/"


def order(project):
    return [attempt.task.key for attempt in landing_queue(project.pk)]


def test_a_fast_change_goes_first_and_the_fast_lane_keeps_its_own_order(lands):
    first, _ = queued(lands, "First")
    second, _ = queued(lands, "Second")
    third, _ = queued(lands, "Third")

    landing_fast(task=third, actor=lands.manager, reason="the outage fix")
    landing_fast(task=second, actor=lands.manager, reason="its follow-up")

    assert order(lands.project) == [third.key, second.key, first.key]
    event = Event.objects.get(transition="fast_lane", task=third)
    assert (event.actor, event.reason, event.extra["alone"]) == (
        lands.manager,
        "the outage fix",
        False,
    )


def test_a_change_alone_in_the_fast_lane_lands_in_a_batch_by_itself(lands):
    first, _ = queued(lands, "First")
    second, _ = queued(lands, "Second")
    third, _ = queued(lands, "Third")
    landing_fast(task=second, actor=lands.manager, reason="hotfix", alone=True)

    queue = list(landing_queue(lands.project.pk))
    assert [a.task.key for a in batch_of(queue)] == [second.key]
    landing_fast(task=third, actor=lands.manager, reason="before it? no: after it")
    queue = list(landing_queue(lands.project.pk))
    # The fast lane in its order: second (alone) first, by itself; then the rest together.
    assert [a.task.key for a in batch_of(queue)] == [second.key]
    assert [a.task.key for a in batch_of(queue[1:])] == [third.key, first.key]


def test_changes_ahead_of_an_alone_change_go_without_it(lands):
    first, _ = queued(lands, "First")
    second, _ = queued(lands, "Second")
    landing_fast(task=first, actor=lands.manager, reason="one")
    landing_fast(task=second, actor=lands.manager, reason="two", alone=True)

    queue = list(landing_queue(lands.project.pk))

    assert [a.task.key for a in batch_of(queue)] == [first.key]


def test_a_fast_change_lands_first_on_the_target(queue, origin, flow):
    alpha, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    beta, _ = queue.approved(feature("beta"), branch="beta", title="Add beta")
    landing_fast(task=beta, actor=flow.manager, reason="the outage fix", alone=True)

    land(flow.project)

    commits = origin.first_parents(origin.base)
    assert [origin.message(c).splitlines()[0] for c in commits] == [
        f"{beta.key}: Add beta",
        f"{alpha.key}: Add alpha",
    ]
    first_batch = Batch.objects.order_by("pk").first()
    assert [c["task"] for c in first_batch.changes] == [beta.key]


def test_the_fast_lane_never_skips_verification(queue, origin, flow):
    tip = origin.tip()
    bad, bad_attempt = queue.approved(broken("bad"), branch="bad")
    landing_fast(task=bad, actor=flow.manager, reason="trust me", alone=True)

    land(flow.project)

    bad.refresh_from_db()
    bad_attempt.refresh_from_db()
    assert origin.tip() == tip
    assert (bad.state, bad_attempt.landing["state"]) == ("ready", "failed")
    assert Batch.objects.get().verify_runs >= 2


def test_a_dequeue_takes_a_change_out_of_the_fast_lane(lands):
    task, attempt = queued(lands)
    landing_fast(task=task, actor=lands.manager, reason="first")

    task_dequeue(task=task, actor=lands.manager, to="in_review", reason="look again")

    attempt.refresh_from_db()
    assert attempt.fast_at is None


@pytest.mark.parametrize(
    "prepare, code",
    [
        (
            lambda flow, task, attempt: task_dequeue(
                task=task, actor=flow.manager, to="ready", reason="not now"
            ),
            "invalid_state",
        ),
        (
            lambda flow, task, attempt: attempt_landing_note(
                attempt=attempt, state="landing", batch=1
            ),
            "landing_in_progress",
        ),
        (
            lambda flow, task, attempt: landing_fast(task=task, actor=flow.manager, reason="first"),
            "already_fast",
        ),
    ],
    ids=["not queued", "in a batch now", "already fast"],
)
def test_a_fast_lane_that_cannot_be_is_409_and_changes_nothing(lands, prepare, code):
    task, attempt = queued(lands)
    prepare(lands, task, attempt)
    before = snapshot(task)

    with pytest.raises(Conflict) as refused:
        landing_fast(task=task, actor=lands.manager, reason="again")

    assert refused.value.code == code
    assert snapshot(task) == before


def test_only_a_manager_puts_a_change_in_the_fast_lane(lands):
    task, _ = queued(lands)
    before = snapshot(task)

    with pytest.raises(PermissionDenied):
        landing_fast(task=task, actor=lands.reviewer, reason="mine first")

    assert snapshot(task) == before


def test_through_the_api_the_queue_shows_the_lane(api, lands):
    first, _ = queued(lands, "First")
    second, _ = queued(lands, "Second")

    response = api(lands.manager).post(
        URL.format(second.key), {"reason": "hotfix", "alone": True}, format="json"
    )

    assert response.status_code == 200
    rows = response.json()["queue"]
    assert [(r["task"], r["lane"]) for r in rows] == [(second.key, "fast"), (first.key, "normal")]
    fast = rows[0]["fast"]
    assert (fast["by"], fast["reason"], fast["alone"]) == (lands.manager.username, "hotfix", True)
    assert rows[1]["fast"] is None


@pytest.mark.parametrize("body", [{}, {"reason": "  "}, {"reason": "x", "alone": "maybe"}])
def test_a_fast_lane_without_a_reason_is_400_and_changes_nothing(api, lands, body):
    task, _ = queued(lands)
    before = snapshot(task)

    response = api(lands.manager).post(URL.format(task.key), body, format="json")

    assert response.status_code == 400
    assert snapshot(task) == before


def test_a_manager_of_another_project_finds_no_fast_lane_here(api, lands, other_flow):
    task, _ = queued(lands)
    before = snapshot(task)

    response = api(other_flow.manager).post(URL.format(task.key), {"reason": "x"}, format="json")

    assert response.status_code == 404
    assert snapshot(task) == before


def test_a_manager_puts_a_change_first_from_the_page(client, lands):
    first, _ = queued(lands, "First")
    second, _ = queued(lands, "Second")
    client.force_login(lands.manager)

    response = client.post(
        f"/projects/FM/landing/{second.key}/fast/",
        {"reason": "the outage fix", "alone": "on"},
        follow=True,
    )

    html = response.content.decode()
    assert f"{second.key} is in the fast lane: it lands next, in a batch by itself" in html
    assert "fast lane</span>" in html
    assert order(lands.project) == [second.key, first.key]


def test_the_page_refuses_a_reviewer_and_changes_nothing(client, lands):
    task, _ = queued(lands)
    before = snapshot(task)
    client.force_login(lands.reviewer)

    response = client.post(f"/projects/FM/landing/{task.key}/fast/", {"reason": "x"}, follow=True)

    assert f"{task.key} was not put in the fast lane: this needs the manager role" in (
        response.content.decode()
    )
    assert snapshot(task) == before


def test_subscribers_hear_of_the_fast_lane_with_who_why_and_alone(lands):
    task, _ = queued(lands)
    landing_fast(task=task, actor=lands.manager, reason="the outage fix", alone=True)
    event = Event.objects.get(transition="fast_lane")

    body = envelope(event, task, type_of("tasks.task", event.transition, event.to_state))

    assert (body["type"], body["actor"], body["data"]["key"]) == (
        "landing.fast_lane",
        lands.manager.username,
        task.key,
    )
    assert (body["data"]["reason"], body["data"]["alone"]) == ("the outage fix", True)


def test_subscribers_hear_of_pauses_and_quarantines_by_the_project_and_the_test(lands):
    pause = landing_pause(project=lands.project, actor=lands.manager, reason="release")
    row = landing_quarantine(
        project=lands.project, actor=lands.manager, test="t.py::T::x", quarantined=True, reason="r"
    )
    paused = Event.objects.get(transition="pause")
    quarantined = Event.objects.get(transition="quarantine")

    one = envelope(paused, pause, type_of("landing.lander", "pause", paused.to_state))
    two = envelope(quarantined, row, type_of("landing.flakytest", "quarantine", "quarantined"))

    assert (one["type"], one["data"]["key"], one["data"]["until"]) == ("landing.paused", "FM", None)
    assert (two["type"], two["data"]["key"]) == ("landing.quarantined", "t.py::T::x")
    assert two["data"]["url"].endswith("/projects/FM/landing/")
