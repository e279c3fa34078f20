"""Pause and resume: a manager stops the landing (a reason, an optional end); approvals keep
queueing, the lander starts no batch, the page, the API and the CLI say who, why and since
when; a resume (or the end passing) lifts it and wakes the lander once. Each an Event; a
refusal changes nothing."""

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from landing import lander as lander_module
from landing.lander import land
from landing.models import Batch, Lander
from landing.pause import paused
from landing.services import landing_pause, landing_resume
from projects.models import Event
from tests.conftest import postgres_only
from tests.landing.conftest import feature, lander_snapshot, queued

pytestmark = pytest.mark.django_db


def url(slug, action=""):
    return f"/api/v1/projects/{slug}/landing/{action}"


def pause(api, flow, user=None, **body):
    return api(user or flow.manager).post(
        url(flow.project.slug, "pause/"),
        {"reason": "release 2.0 is being cut", **body},
        format="json",
    )


def test_a_manager_pauses_landing_and_members_see_who_why_since_and_until_when(api, lands):
    until = timezone.now() + timedelta(hours=2)

    answer = pause(api, lands, until=until.isoformat())

    assert answer.status_code == 200
    paused = api(lands.agent).get(url("FM")).json()["lander"]["paused"]
    lander = Lander.objects.get()
    assert paused == {
        "by": lands.manager.username,
        "reason": "release 2.0 is being cut",
        "since": lander.paused_at.isoformat().replace("+00:00", "Z"),
        "until": lander.paused_until.isoformat().replace("+00:00", "Z"),
    }
    assert abs((lander.paused_until - until).total_seconds()) < 1
    event = Event.objects.get(transition="pause")
    assert (event.actor, event.reason, event.from_state, event.to_state) == (
        lands.manager,
        "release 2.0 is being cut",
        "landing",
        "paused",
    )
    assert event.extra["until"] == lander.paused_until.isoformat()


def test_approvals_keep_queueing_while_landing_is_paused(api, lands):
    pause(api, lands)

    task, attempt = queued(lands)

    assert (task.state, attempt.landing["state"]) == ("approved", "queued")
    assert api(lands.agent).get(url("FM")).json()["queued"] == 1


def test_pausing_twice_is_409_naming_the_pause_and_changes_nothing(api, lands):
    pause(api, lands)
    before = lander_snapshot(lands.project), Lander.objects.get().pause_reason

    answer = pause(api, lands, reason="another reason")

    assert answer.status_code == 409
    assert answer.json()["code"] == "already_paused"
    assert "release 2.0 is being cut" in answer.json()["detail"]
    assert (lander_snapshot(lands.project), Lander.objects.get().pause_reason) == before


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"reason": ""}, 400, "invalid"),
        ({"reason": "   "}, 400, "invalid"),
        ({"until": "tomorrow"}, 400, "invalid"),
        ({"until": "2020-01-01T00:00:00Z"}, 409, "until_passed"),
    ],
)
def test_a_pause_without_a_reason_or_with_an_end_past_is_refused_and_changes_nothing(
    api, lands, body, status, code
):
    before = lander_snapshot(lands.project)

    answer = pause(api, lands, **body)

    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert lander_snapshot(lands.project) == before
    assert not Lander.objects.filter(paused_at__isnull=False).exists()


@pytest.mark.parametrize("role", ["agent", "reviewer", "verifier"])
def test_only_managers_pause_or_resume_and_a_refusal_changes_nothing(api, lands, role):
    user = getattr(lands, role)
    before = lander_snapshot(lands.project)

    paused = pause(api, lands, user=user)
    landing_pause(project=lands.project, actor=lands.manager, reason="a freeze")
    during = lander_snapshot(lands.project)
    resumed = api(user).post(url("FM", "resume/"), {}, format="json")

    assert (paused.status_code, resumed.status_code) == (403, 403)
    assert before[1] + 1 == during[1]
    assert lander_snapshot(lands.project) == during
    assert Lander.objects.get().paused


def test_a_manager_of_another_project_finds_no_landing_to_pause_or_resume(api, lands, other_flow):
    before = lander_snapshot(lands.project)

    paused = pause(api, lands, user=other_flow.manager)
    landing_pause(project=lands.project, actor=lands.manager, reason="a freeze")
    during = lander_snapshot(lands.project)
    resumed = api(other_flow.manager).post(url("FM", "resume/"), {}, format="json")

    assert (paused.status_code, resumed.status_code) == (404, 404)
    assert before[1] + 1 == during[1]
    assert lander_snapshot(lands.project) == during


def test_a_resume_lifts_the_pause_with_an_event_and_wakes_the_lander_once(
    api, lands, django_capture_on_commit_callbacks
):
    pause(api, lands)

    with django_capture_on_commit_callbacks() as sent:
        answer = api(lands.manager).post(
            url("FM", "resume/"), {"reason": "2.0 is out"}, format="json"
        )

    assert answer.status_code == 200
    assert answer.json()["lander"]["paused"] is None
    assert len(sent) == 1  # the lander's job, once this commits
    event = Event.objects.get(transition="unpause")
    assert (event.actor, event.reason, event.from_state, event.to_state) == (
        lands.manager,
        "2.0 is out",
        "paused",
        "landing",
    )
    assert event.extra["was"] == "release 2.0 is being cut"
    assert event.extra["paused_by"] == lands.manager.username


def test_resuming_a_landing_that_is_not_paused_is_409_and_wakes_nothing(
    api, lands, django_capture_on_commit_callbacks
):
    before = lander_snapshot(lands.project)

    with django_capture_on_commit_callbacks() as sent:
        answer = api(lands.manager).post(url("FM", "resume/"), {}, format="json")

    assert (answer.status_code, answer.json()["code"]) == (409, "not_paused")
    assert (lander_snapshot(lands.project), sent) == (before, [])


# --- The lander, on a real origin, in the real sandbox -------------------------------------


def test_a_paused_lander_lands_nothing_and_after_the_resume_lands_what_queued(
    queue, origin, flow, api
):
    landing_pause(project=flow.project, actor=flow.manager, reason="release freeze")
    task, _ = queue.approved(feature("alpha"), branch="alpha")
    tip = origin.tip()

    counts = land(flow.project)

    task.refresh_from_db()
    assert counts == {"batches": 0, "landed": 0, "returned": 0, "settled": 0, "paused": True}
    assert (task.state, origin.tip(), Batch.objects.count()) == ("approved", tip, 0)

    api(flow.manager).post(url(flow.project.slug, "resume/"), {}, format="json")
    counts = land(flow.project)

    task.refresh_from_db()
    assert (counts["landed"], task.state) == (1, "done")


def test_a_pause_whose_end_has_passed_is_lifted_by_the_lander_which_then_lands(queue, origin, flow):
    landing_pause(
        project=flow.project,
        actor=flow.manager,
        reason="until the release",
        until=timezone.now() + timedelta(hours=1),
    )
    task, _ = queue.approved(feature("alpha"), branch="alpha")
    Lander.objects.update(paused_until=timezone.now() - timedelta(seconds=1))

    counts = land(flow.project)

    task.refresh_from_db()
    assert (counts["landed"], task.state) == (1, "done")
    lifted = Event.objects.get(transition="unpause")
    assert (lifted.actor, lifted.reason.startswith("the pause ended at")) == (None, True)
    assert not Lander.objects.get().paused


def test_a_pause_during_a_run_stops_the_lander_before_its_next_batch(
    queue, origin, flow, monkeypatch
):
    queue.on(batch_max=1)
    first, _ = queue.approved(feature("alpha"), branch="alpha")
    second, _ = queue.approved(feature("beta"), branch="beta")
    land_batch = lander_module.land_batch

    def and_then_a_pause(*args, **kwargs):
        batch = land_batch(*args, **kwargs)
        if not Lander.objects.filter(paused_at__isnull=False).exists():
            landing_pause(project=flow.project, actor=flow.manager, reason="stop after this")
        return batch

    monkeypatch.setattr(lander_module, "land_batch", and_then_a_pause)

    counts = land(flow.project)

    first.refresh_from_db()
    second.refresh_from_db()
    assert (counts["batches"], counts["paused"]) == (1, True)
    assert (first.state, second.state) == ("done", "approved")


# --- The page -------------------------------------------------------------------------------


def test_the_page_says_landing_is_paused_by_whom_why_and_until_when(client, lands):
    landing_pause(
        project=lands.project,
        actor=lands.manager,
        reason="release <2.0> freeze",
        until=timezone.now() + timedelta(hours=3),
    )
    client.force_login(lands.reviewer)

    html = client.get("/projects/FM/landing/").content.decode()

    assert "Landing is paused" in html
    assert f"by {lands.manager.username}" in html
    assert "release &lt;2.0&gt; freeze" in html
    assert "Approvals keep queueing; nothing lands until" in html
    assert "/landing/resume/" not in html  # a reviewer gets no button


def test_a_manager_pauses_and_resumes_from_the_page(client, lands):
    client.force_login(lands.manager)
    form = client.get("/projects/FM/landing/").content.decode()

    paused = client.post(
        "/projects/FM/landing/pause/",
        {"reason": "incident 42", "until": ""},
        follow=True,
    )
    resumed = client.post("/projects/FM/landing/resume/", {"reason": "over"}, follow=True)

    assert 'action="/projects/FM/landing/pause/"' in form
    assert "Landing is paused: approvals queue, nothing lands." in paused.content.decode()
    assert 'action="/projects/FM/landing/resume/"' in paused.content.decode()
    assert "Landing resumed" in resumed.content.decode()
    assert [e.transition for e in Event.objects.filter(transition__in=["pause", "unpause"])] == [
        "pause",
        "unpause",
    ]
    assert Event.objects.get(transition="unpause").reason == "over"


def test_an_end_given_on_the_page_is_kept_in_the_sites_time_zone(client, lands):
    client.force_login(lands.manager)
    until = timezone.localtime(timezone.now() + timedelta(days=1)).replace(second=0, microsecond=0)

    client.post(
        "/projects/FM/landing/pause/",
        {"reason": "weekend", "until": until.strftime("%Y-%m-%dT%H:%M")},
    )

    assert Lander.objects.get().paused_until == until


def test_a_reviewer_cannot_pause_from_the_page_and_learns_nothing_of_the_form(client, lands):
    before = lander_snapshot(lands.project)
    client.force_login(lands.reviewer)

    response = client.post(
        "/projects/FM/landing/pause/", {"reason": "", "until": "not a time"}, follow=True
    )

    assert "Landing was not paused: this needs the manager role in the project" in (
        response.content.decode()
    )
    assert lander_snapshot(lands.project) == before


def test_a_managers_unreadable_end_says_why_and_changes_nothing(client, lands):
    before = lander_snapshot(lands.project)
    client.force_login(lands.manager)

    response = client.post(
        "/projects/FM/landing/pause/", {"reason": "freeze", "until": "next friday"}, follow=True
    )

    assert "Landing was not paused: until: Enter a valid date/time." in response.content.decode()
    assert lander_snapshot(lands.project) == before


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("x" * 10_001, "reason: Ensure this value has at most 10000 characters"),
        ("a\x00b", "reason: Null characters are not allowed."),
    ],
)
def test_a_managers_unreadable_reason_on_the_page_says_why_and_changes_nothing(
    client, lands, reason, said
):
    before = lander_snapshot(lands.project)
    client.force_login(lands.manager)

    response = client.post("/projects/FM/landing/pause/", {"reason": reason}, follow=True)

    assert f"Landing was not paused: {said}" in response.content.decode()
    assert lander_snapshot(lands.project) == before


def side_by_side(*steps):
    """Run each step in a thread of its own (its own connection), all released at once;
    what each returned or raised, in order."""
    start = threading.Barrier(len(steps))
    results: list = [None] * len(steps)

    def run(index, step):
        try:
            start.wait(10)
            results[index] = step()
        except Exception as exc:  # the test reads what each one met
            results[index] = exc
        finally:
            connections.close_all()  # this thread's own

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(steps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_two_landers_waking_as_a_pause_ends_lift_it_once_and_land_the_change_once(
    queue, origin, flow
):
    landing_pause(
        project=flow.project,
        actor=flow.manager,
        reason="until the release",
        until=timezone.now() + timedelta(hours=1),
    )
    task, _ = queue.approved(feature("alpha"), branch="alpha")
    Lander.objects.update(paused_until=timezone.now() - timedelta(seconds=1))

    results = side_by_side(lambda: land(flow.project), lambda: land(flow.project))

    assert not any(isinstance(r, Exception) for r in results), results
    assert sorted(r["landed"] for r in results) == [0, 1]  # the other found the lock held
    task.refresh_from_db()
    assert task.state == "done"
    assert Event.objects.filter(transition="unpause").count() == 1
    assert Batch.objects.filter(state="landed").count() == 1
    assert len(origin.reflog_moves()) == 1


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_resume_racing_the_landers_own_lift_ends_the_pause_once(lands):
    landing_pause(
        project=lands.project,
        actor=lands.manager,
        reason="until the release",
        until=timezone.now() + timedelta(hours=1),
    )
    Lander.objects.update(paused_until=timezone.now() - timedelta(seconds=1))

    asked, resumed = side_by_side(
        lambda: paused(lands.project),
        lambda: landing_resume(project=lands.project, actor=lands.manager, reason="go"),
    )

    assert asked is False
    # Whichever came second found it lifted: the resume then says so and changes nothing.
    assert isinstance(resumed, Lander) or getattr(resumed, "code", None) == "not_paused"
    assert Event.objects.filter(transition="unpause").count() == 1
    assert not Lander.objects.get().paused
