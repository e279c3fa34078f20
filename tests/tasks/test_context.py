"""The context bundle: what an agent gets, what is recorded, and what the budget drops."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from decisions import services as decisions
from evidence import services as evidence
from evidence.models import GateRunState
from tasks import attempts, review, selectors, services
from tasks.models import Attempt
from tests.factories import expire_lease


def accepted_decision(flow, title, text="", **concerns):
    decision = decisions.decision_propose(
        project=flow.project,
        actor=flow.manager,
        title=title,
        context="c",
        decision=f"{title} it is. {text}",
        **concerns,
    )
    return decisions.decision_accept(decision=decision, actor=flow.reviewer)


def context(api, user, task, **params):
    return api(user).get(f"/api/v1/tasks/{task.key}/context/", params)


@pytest.mark.django_db
def test_the_holder_gets_task_spec_and_criteria_with_their_proof(flow, api):
    spec = flow.spec()
    task, _ = flow.claimed(spec=spec, title="Claim", allowed_paths=["tasks/**"], labels=["api"])

    body = context(api, flow.agent, task).json()

    assert (body["task"]["key"], body["task"]["allowed_paths"], body["task"]["labels"]) == (
        task.key,
        ["tasks/**"],
        ["api"],
    )
    assert (body["spec"]["key"], body["spec"]["version"]) == (spec.key, 1)
    assert [(c["key"], c["proof"]["check"]) for c in body["spec"]["criteria"]] == [
        ("AC-1", "tests"),
        ("AC-2", "evidence"),
        ("AC-3", "review"),
    ]
    assert body["spec"]["criteria"][0]["needs"] == (
        "JUnit evidence in which the tests matching tests/test_claim.py::* ran and passed"
    )


@pytest.mark.django_db
def test_fetching_records_the_hash_and_manifest_on_the_attempt(flow, api):
    task, attempt = flow.claimed()

    body = context(api, flow.agent, task).json()

    attempt.refresh_from_db()
    assert attempt.context_sha256 == body["bundle_sha256"]
    assert attempt.context_manifest == body["manifest"]
    assert attempt.context_fetched_at is not None


@pytest.mark.django_db
def test_same_sources_give_the_same_hash_and_new_material_changes_it(flow, api):
    spec = flow.spec()
    task, _ = flow.claimed(spec=spec)

    first = context(api, flow.agent, task).json()["bundle_sha256"]
    second = context(api, flow.agent, task).json()["bundle_sha256"]
    accepted_decision(flow, "Use SKIP LOCKED", specs=[spec])
    third = context(api, flow.agent, task).json()["bundle_sha256"]

    assert first == second
    assert third != first


@pytest.mark.django_db
def test_only_accepted_decisions_that_concern_the_task_or_its_spec_are_included(flow, api):
    spec = flow.spec()
    task, _ = flow.claimed(spec=spec)
    old = accepted_decision(flow, "Old way", tasks=[task])
    accepted_decision(flow, "New way", tasks=[task], supersedes=[old])
    accepted_decision(flow, "Spec rule", specs=[spec])
    accepted_decision(flow, "Elsewhere")
    rejected = decisions.decision_propose(
        project=flow.project,
        actor=flow.manager,
        title="Nope",
        context="c",
        decision="d",
        tasks=[task],
    )
    decisions.decision_reject(decision=rejected, actor=flow.reviewer, reason="no")

    body = context(api, flow.agent, task).json()

    assert [d["title"] for d in body["decisions"]] == ["New way", "Spec rule"]


@pytest.mark.django_db
def test_earlier_attempts_say_why_they_ended_with_gate_verdicts_and_evidence_links(flow, api):
    flow.gates({"diff-scope": {}})
    task, first = flow.checking()
    runs = evidence.gate_runs_create(attempt=first, policy={"diff-scope": {}})
    evidence.gate_run_start(run=runs[0])
    evidence.gate_run_finish(
        run=runs[0],
        outcome=GateRunState.FAILED,
        summary="1 file outside: settings.py",
        verdict={"outside": ["settings.py"]},
        report=(b"outside: settings.py\n", "note", "diff-scope.txt", "text/plain"),
    )
    attempts.attempt_checks_conclude(attempt=first)
    second = attempts.task_claim(agent=flow.agent2)

    body = context(api, flow.agent2, task).json()

    (earlier,) = body["attempts"]
    assert (earlier["number"], earlier["state"]) == (1, "failed")
    assert earlier["ended_because"] == "gates failed — diff-scope: 1 file outside: settings.py"
    (gate,) = earlier["gates"]
    assert (gate["gate"], gate["state"], gate["verdict"]) == (
        "diff-scope",
        "failed",
        {"outside": ["settings.py"]},
    )
    assert gate["report"].startswith("/api/v1/evidence/")
    assert second.number == 2


@pytest.mark.django_db
def test_a_rejection_reason_reaches_the_next_attempt(flow, api):
    task, _ = flow.in_review()
    review.task_reject(task=task, actor=flow.reviewer, reason="AC-2: attach the screenshot")
    attempts.task_claim(agent=flow.agent2)

    (earlier,) = context(api, flow.agent2, task).json()["attempts"]

    assert earlier["review"] == {
        "verdict": "reject",
        "by": flow.reviewer.username,
        "reason": "AC-2: attach the screenshot",
    }


@pytest.mark.django_db
def test_a_killed_agents_checkpoint_reaches_the_next_agent(flow, api):
    task, first = flow.claimed()
    attempts.attempt_checkpoint_save(
        attempt=first, actor=flow.agent, data={"step": "tests written"}, revision=0
    )
    expire_lease(first)
    attempts.task_claim(agent=flow.agent2)

    body = context(api, flow.agent2, task).json()

    assert body["checkpoint"]["attempt"] == 1
    assert body["checkpoint"]["data"] == {"step": "tests written"}
    assert body["attempts"][0]["ended_because"] == "lease expired without a heartbeat"


@pytest.mark.django_db
def test_max_chars_drops_the_least_relevant_items_and_says_so(flow, api):
    spec = flow.spec()
    task, _ = flow.claimed(spec=spec)
    for i in range(5):
        accepted_decision(flow, f"Decision {i}", "x" * 300, specs=[spec])
    full = context(api, flow.agent, task).json()
    budget = full["manifest"][0]["chars"] + full["manifest"][1]["chars"] + 700

    trimmed = context(api, flow.agent, task, max_chars=budget).json()

    assert trimmed["chars"] <= budget
    included = [m["id"] for m in trimmed["manifest"] if m["included"]]
    dropped = [m["id"] for m in trimmed["manifest"] if not m["included"]]
    assert included[:2] == [task.key, spec.key]
    assert len(trimmed["decisions"]) == len(included) - 2
    assert dropped and all(d.startswith("FM-D") for d in dropped)
    assert trimmed["bundle_sha256"] != full["bundle_sha256"]


@pytest.mark.django_db
@pytest.mark.parametrize("max_chars", ["0", "-1", "many"])
def test_a_bad_budget_is_400(flow, api, max_chars):
    task, _ = flow.claimed()

    response = context(api, flow.agent, task, max_chars=max_chars)

    assert (response.status_code, list(response.json()["fields"])) == (400, ["max_chars"])


@pytest.mark.django_db
def test_another_agent_may_not_read_the_context(flow, api):
    task, _ = flow.claimed()

    response = context(api, flow.agent2, task)

    assert (response.status_code, response.json()["code"]) == (403, "not_lease_holder")


@pytest.mark.django_db
def test_a_reviewer_reads_the_context_without_it_being_recorded(flow, api):
    task, attempt = flow.claimed()

    response = context(api, flow.reviewer, task)

    assert response.status_code == 200
    assert Attempt.objects.get(pk=attempt.pk).context_sha256 == ""


@pytest.mark.django_db
def test_a_lost_lease_gets_409_and_nothing_is_recorded(flow, api):
    task, attempt = flow.claimed()
    expire_lease(attempt)

    response = context(api, flow.agent, task)

    assert (response.status_code, response.json()["code"]) == (409, "lease_lost")
    assert Attempt.objects.get(pk=attempt.pk).context_sha256 == ""


@pytest.mark.django_db
def test_the_query_count_does_not_grow_with_the_project(flow):
    spec = flow.spec()
    task, _attempt = flow.claimed(spec=spec)

    def queries():
        fresh = selectors.task_for(flow.agent, task.key)  # as the API loads it
        with CaptureQueriesContext(connection) as captured:
            services.task_context(task=fresh, actor=flow.agent)
        return len(captured)

    small = queries()
    for i in range(15):
        other = flow.draft(title=f"other {i}", spec=spec)
        accepted_decision(flow, f"unrelated {i}", tasks=[other])
    assert queries() == small


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query", ["max_chars=", "max_chars=5.0", "max_chars=%2B5", "max_chars=9&max_chars=9"]
)
def test_a_budget_given_empty_signed_fractional_or_twice_is_400(flow, api, query):
    task, attempt = flow.claimed()
    fetched_before = Attempt.objects.get(pk=attempt.pk).context_fetched_at

    response = api(flow.agent).get(f"/api/v1/tasks/{task.key}/context/?{query}")

    assert response.status_code == 400
    assert response.json()["fields"] == {"max_chars": ["must be a whole number from 1, given once"]}
    assert Attempt.objects.get(pk=attempt.pk).context_fetched_at == fetched_before


@pytest.mark.django_db
def test_a_withdrawal_reason_reaches_the_next_attempt(flow, api):
    task, attempt = flow.in_review(max_attempts=1)
    attempts.attempt_withdraw(attempt=attempt, reason="pull request #4 closed on GitHub by @ann")
    attempts.task_claim(agent=flow.agent2)

    (earlier,) = context(api, flow.agent2, task).json()["attempts"]

    assert (earlier["state"], earlier["ended_because"]) == (
        "released",
        "pull request #4 closed on GitHub by @ann",
    )


@pytest.mark.django_db
def test_a_withdrawal_that_counted_reaches_the_next_attempt_as_failed(flow, api):
    task, attempt = flow.in_review(max_attempts=3)
    for _ in range(attempts.WITHDRAWALS_FREE):
        attempts.attempt_withdraw(attempt=attempt, reason="closed")
        attempt = attempts.task_claim(agent=flow.agent)
    attempts.attempt_withdraw(attempt=attempt, reason="pull request #3 closed on GitHub by @ann")
    attempts.task_claim(agent=flow.agent2)

    body = context(api, flow.agent2, task).json()
    (earlier,) = [a for a in body["attempts"] if a["number"] == 3]

    assert (earlier["state"], earlier["ended_because"]) == (
        "failed",
        "pull request #3 closed on GitHub by @ann; this task's pull requests were closed 3"
        " times, more than the 2 that are free, so this attempt counts as failed"
        " (1 of 3 attempts used)",
    )
