"""Claiming, leases, heartbeats, checkpoints and lease expiry."""

import threading
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from projects.errors import Conflict, PermissionDenied
from projects.models import Event
from tasks import attempts
from tasks.models import Attempt, Task
from tests.conftest import postgres_only
from tests.factories import expire_lease, member


@pytest.mark.django_db
def test_claim_takes_highest_priority_then_oldest(flow):
    flow.ready(title="old, low")
    urgent_new = flow.ready(title="new, urgent", priority=5)
    flow.ready(title="newer, urgent", priority=5)

    attempt = attempts.task_claim(agent=flow.agent)

    assert attempt.task_id == urgent_new.pk
    assert (attempt.number, attempt.state, attempt.agent) == (1, "running", flow.agent)


@pytest.mark.django_db
def test_claim_returns_none_when_nothing_is_claimable(flow):
    flow.draft()
    events_before = Event.objects.count()

    assert attempts.task_claim(agent=flow.agent) is None
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_claim_never_hands_out_a_task_whose_dependencies_are_open(flow):
    first = flow.ready(title="first")
    flow.ready(title="second", depends_on=[first], priority=9)

    claimed = attempts.task_claim(agent=flow.agent)
    nothing = attempts.task_claim(agent=flow.agent2)

    assert claimed.task_id == first.pk
    assert nothing is None


@pytest.mark.django_db
def test_a_task_becomes_claimable_when_its_dependencies_are_done(flow):
    first, _ = flow.done(title="first")
    second = flow.ready(title="second", depends_on=[first])

    assert attempts.task_claim(agent=flow.agent).task_id == second.pk


@pytest.mark.django_db
def test_claim_filters_by_every_label_asked_for(flow):
    flow.ready(title="backend", labels=["backend"])
    both = flow.ready(title="backend ui", labels=["backend", "ui"])

    attempt = attempts.task_claim(agent=flow.agent, labels=["ui", "backend"])

    assert attempt.task_id == both.pk
    assert attempts.task_claim(agent=flow.agent2, labels=["ops"]) is None


@pytest.mark.django_db
def test_claim_only_looks_in_the_agents_projects(flow, other_flow):
    other_flow.ready()

    assert attempts.task_claim(agent=flow.agent) is None
    with pytest.raises(PermissionDenied):
        attempts.task_claim(agent=flow.agent, project=other_flow.project)


@pytest.mark.django_db
def test_only_agents_claim(flow):
    flow.ready()

    with pytest.raises(PermissionDenied) as refused:
        attempts.task_claim(agent=flow.reviewer)

    assert refused.value.detail == "you are not an agent in any project"
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("lease_seconds", [0, 3601, -5, "60", 1.5, True])
def test_claim_refuses_a_lease_outside_the_bounds(flow, lease_seconds):
    task = flow.ready()

    with pytest.raises(ValidationError) as refused:
        attempts.task_claim(agent=flow.agent, lease_seconds=lease_seconds)

    assert "lease_seconds" in refused.value.message_dict
    task.refresh_from_db()
    assert (task.state, Attempt.objects.count()) == ("ready", 0)


@pytest.mark.django_db
def test_claim_sets_the_lease_and_defaults_to_five_minutes(flow):
    flow.ready()
    before = timezone.now()

    attempt = attempts.task_claim(agent=flow.agent)

    assert before + timedelta(seconds=300) <= attempt.lease_expires_at
    assert attempt.lease_expires_at <= timezone.now() + timedelta(seconds=300)


@pytest.mark.django_db
def test_claim_pins_the_current_spec_version(flow):
    spec = flow.spec()
    task = flow.ready(spec=spec)

    attempt = attempts.task_claim(agent=flow.agent)

    assert attempt.task_id == task.pk
    assert attempt.spec_version == spec.versions.get(state="accepted")


@pytest.mark.django_db
def test_claim_records_start_and_claim_events(flow):
    task = flow.ready()

    attempt = attempts.task_claim(agent=flow.agent)

    events = list(Event.objects.filter(task=task).order_by("id")[2:])
    assert [(e.object_key, e.transition, e.from_state, e.to_state) for e in events] == [
        (f"{task.key}#1", "start", "", "running"),
        (task.key, "claim", "ready", "claimed"),
    ]
    assert all(e.actor == flow.agent for e in events)
    assert Task.objects.get(pk=task.pk).current_attempt == attempt


@pytest.mark.django_db
def test_an_expired_lease_is_reclaimed_lazily_at_claim_time(flow):
    task, first = flow.claimed()
    expire_lease(first)

    second = attempts.task_claim(agent=flow.agent2)

    first.refresh_from_db()
    assert (second.task_id, second.number) == (task.pk, 2)
    assert (first.state, first.end_reason) == ("abandoned", "lease expired without a heartbeat")
    expiry = Event.objects.get(task=task, transition="expire", object_key=task.key)
    assert (expiry.actor, expiry.from_state, expiry.to_state) == (None, "claimed", "ready")


@pytest.mark.django_db
def test_a_live_lease_is_never_reclaimed(flow):
    flow.claimed()

    assert attempts.task_claim(agent=flow.agent2) is None


@pytest.mark.django_db
def test_a_task_has_at_most_one_live_attempt(flow):
    task, _ = flow.claimed()

    with pytest.raises(IntegrityError), transaction.atomic():
        Attempt.objects.create(task=task, number=2, agent=flow.agent2)

    assert list(task.attempts.values_list("number", flat=True)) == [1]


@pytest.mark.django_db
def test_attempt_numbers_are_unique_per_task(flow):
    task, attempt = flow.claimed()
    attempts.attempt_release(attempt=attempt, actor=flow.agent)

    with pytest.raises(IntegrityError), transaction.atomic():
        Attempt.objects.create(task=task, number=1, agent=flow.agent2, state="released")


@pytest.mark.django_db
def test_keys_are_unique_per_project(flow):
    task = flow.draft()

    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(project=flow.project, number=task.number, key="FM-999", title="dup")


@pytest.mark.django_db
def test_task_keys_count_up_per_project(flow, other_flow):
    keys = [flow.draft().key, flow.draft().key, other_flow.draft().key]

    assert keys == ["FM-1", "FM-2", "OT-1"]


@pytest.mark.django_db
def test_heartbeat_extends_the_lease(flow):
    _, attempt = flow.claimed(lease_seconds=10)

    beat = attempts.attempt_heartbeat(attempt=attempt, actor=flow.agent, lease_seconds=600)

    assert beat.lease_expires_at > timezone.now() + timedelta(seconds=590)
    assert Attempt.objects.get(pk=attempt.pk).lease_expires_at == beat.lease_expires_at


@pytest.mark.django_db
def test_heartbeat_after_the_lease_ran_out_is_lease_lost(flow):
    _, attempt = flow.claimed()
    expire_lease(attempt)
    expired_at = Attempt.objects.get(pk=attempt.pk).lease_expires_at

    with pytest.raises(Conflict) as refused:
        attempts.attempt_heartbeat(attempt=attempt, actor=flow.agent)

    assert refused.value.code == "lease_lost"
    assert Attempt.objects.get(pk=attempt.pk).lease_expires_at == expired_at


@pytest.mark.django_db
def test_heartbeat_by_another_agent_is_refused(flow):
    _, attempt = flow.claimed()

    with pytest.raises(PermissionDenied) as refused:
        attempts.attempt_heartbeat(attempt=attempt, actor=flow.agent2)

    assert refused.value.code == "not_lease_holder"


@pytest.mark.django_db
def test_checkpoint_revisions_count_up(flow):
    _, attempt = flow.claimed()

    first = attempts.attempt_checkpoint_save(
        attempt=attempt, actor=flow.agent, data={"step": 1}, revision=0
    )
    second = attempts.attempt_checkpoint_save(
        attempt=attempt, actor=flow.agent, data={"step": 2}, revision=1
    )

    assert (first.checkpoint_revision, second.checkpoint_revision) == (1, 2)
    assert Attempt.objects.get(pk=attempt.pk).checkpoint == {"step": 2}


@pytest.mark.django_db
def test_a_stale_checkpoint_revision_is_refused_and_keeps_the_newer_data(flow):
    _, attempt = flow.claimed()
    attempts.attempt_checkpoint_save(
        attempt=attempt, actor=flow.agent, data={"step": 1}, revision=0
    )

    with pytest.raises(Conflict) as refused:
        attempts.attempt_checkpoint_save(
            attempt=attempt, actor=flow.agent, data={"step": "old"}, revision=0
        )

    assert (refused.value.code, refused.value.extra) == ("checkpoint_conflict", {"revision": 1})
    assert Attempt.objects.get(pk=attempt.pk).checkpoint == {"step": 1}


@pytest.mark.django_db
def test_a_lost_lease_cannot_checkpoint(flow):
    _, attempt = flow.claimed()
    expire_lease(attempt)

    with pytest.raises(Conflict) as refused:
        attempts.attempt_checkpoint_save(
            attempt=attempt, actor=flow.agent, data={"x": 1}, revision=0
        )

    assert refused.value.code == "lease_lost"
    assert Attempt.objects.get(pk=attempt.pk).checkpoint is None


@pytest.mark.django_db
def test_reconciler_expires_only_overdue_leases(flow):
    overdue_task, overdue = flow.claimed(title="overdue")
    live_task, _ = flow.claimed(title="live", agent=flow.agent2)
    expire_lease(overdue)

    assert attempts.leases_expire_overdue() == 1

    overdue_task.refresh_from_db()
    live_task.refresh_from_db()
    assert (overdue_task.state, live_task.state) == ("ready", "claimed")
    assert Attempt.objects.get(pk=overdue.pk).state == "abandoned"


@pytest.mark.django_db
def test_a_released_or_expired_attempt_does_not_use_up_the_budget(flow):
    task, attempt = flow.claimed(max_attempts=1)
    attempts.attempt_release(attempt=attempt, actor=flow.agent)

    again = attempts.task_claim(agent=flow.agent2)

    assert (again.task_id, again.number) == (task.pk, 2)


@pytest.mark.django_db
def test_membership_in_another_role_does_not_make_an_agent(flow):
    flow.ready()
    manager_only = member(flow.project, "manager")

    with pytest.raises(PermissionDenied):
        attempts.task_claim(agent=manager_only)


# --- PostgreSQL: real concurrency ------------------------------------------------------------


def _claim_in_threads(agents, rounds):
    """Each agent claims ``rounds`` times in its own thread and connection; return all attempts."""
    results, errors = [], []
    barrier = threading.Barrier(len(agents))

    def work(agent):
        try:
            barrier.wait()
            for _ in range(rounds):
                attempt = attempts.task_claim(agent=agent, lease_seconds=600)
                if attempt is not None:
                    results.append((agent.pk, attempt.task_id))
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(agent,)) for agent in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    return results


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_get_the_same_task(flow):
    tasks = [flow.ready(title=f"t{i}") for i in range(40)]
    agents = [member(flow.project, "agent", f"racer{i}") for i in range(8)]

    results = _claim_in_threads(agents, rounds=8)

    claimed = [task_id for _, task_id in results]
    assert len(claimed) == len(set(claimed)) == 40
    assert set(claimed) == {t.pk for t in tasks}
    assert Attempt.objects.filter(state="running").count() == 40


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_take_a_task_with_open_dependencies(flow):
    blockers = [flow.ready(title=f"blocker{i}") for i in range(6)]
    waiting = [
        flow.ready(title=f"waiting{i}", depends_on=[b], priority=9) for i, b in enumerate(blockers)
    ]
    agents = [member(flow.project, "agent", f"racer{i}") for i in range(6)]

    results = _claim_in_threads(agents, rounds=3)

    claimed = {task_id for _, task_id in results}
    assert claimed == {b.pk for b in blockers}
    assert not claimed & {w.pk for w in waiting}
