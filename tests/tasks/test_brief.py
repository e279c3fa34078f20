"""The context bundle as a Markdown brief: what it says, what it costs, what is recorded."""

import re

import pytest

from decisions import services as decisions
from evidence import services as evidence
from projects.models import Event
from tasks import attempts, brief, context, review
from tasks.models import Attempt
from tests.factories import expire_lease

FAILING_JUNIT = (
    b"<testsuite tests='2'>"
    b"<testcase classname='tests.test_claim' name='test_claim'/>"
    b"<testcase classname='tests.test_claim' name='test_exclusive'>"
    b"<failure message='assert 2 == 1'>two agents held FM-1</failure></testcase>"
    b"</testsuite>"
)


def markdown(api, user, task, **params):
    return api(user).get(f"/api/v1/tasks/{task.key}/context/", {"format": "markdown", **params})


def accepted_decision(flow, title, text="", **concerns):
    decision = decisions.decision_propose(
        project=flow.project,
        actor=flow.manager,
        title=title,
        context="c",
        decision=f"{title} it is.{text}",
        **concerns,
    )
    return decisions.decision_accept(decision=decision, actor=flow.reviewer)


def failed_then_rejected(flow):
    """Attempt 1 fails tests-pass on a failing test, attempt 2 is rejected in review,
    attempt 3 (agent2's) is running."""
    flow.gates({"tests-pass": {}})
    task, first = flow.claimed(spec=flow.spec())
    flow.attach(first, FAILING_JUNIT, kind="junit", name="junit.xml", criteria=["AC-1"])
    attempts.attempt_submit(attempt=first, actor=flow.agent, summary="first", change={})
    for run in first.gate_runs.all():
        evidence.gate_run_execute(run=run)
    flow.gates({})
    second = attempts.task_claim(agent=flow.agent, project=flow.project)
    attempts.attempt_submit(attempt=second, actor=flow.agent, summary="second", change={})
    attempts.attempt_gates_passed(attempt=second)
    review.task_reject(task=task, actor=flow.reviewer, reason="AC-2: attach the screenshot")
    return task, attempts.task_claim(agent=flow.agent2, project=flow.project)


def criteria_lines(text):
    return [line for line in text.splitlines() if line.startswith("- AC-")]


@pytest.mark.django_db
def test_the_brief_states_the_task_its_paths_and_every_criterion_with_its_proof(flow, api):
    task, _ = flow.claimed(
        spec=flow.spec(), title="Claim", description="Do it.", allowed_paths=["tasks/**"]
    )

    response = markdown(api, flow.agent, task)

    text = response.content.decode()
    assert (response.status_code, response["Content-Type"]) == (200, "text/markdown; charset=utf-8")
    assert text.startswith(
        "# FM-1: Claim\n\nState: claimed · priority 0 · failed attempts: 0 of 3\n"
        "Allowed paths (change nothing else): `tasks/**`\n\nDo it.\n\n"
        "## Spec FM-S1 v1: Claiming\n\n### Spec\n\n"
        "Acceptance criteria, each with the proof it needs:\n"
    )
    assert criteria_lines(text) == [
        "- AC-1 — Claims are exclusive. — needs JUnit evidence in which the tests matching "
        "tests/test_claim.py::* ran and passed",
        "- AC-2 — The queue is shown. — needs screenshot evidence attached to the attempt and "
        "naming this criterion",
        "- AC-3 — Readable code. — needs a reviewer's approval",
    ]


@pytest.mark.django_db
def test_only_the_accepted_decisions_that_bind_the_task_are_stated(flow, api):
    task, _ = flow.claimed(spec=flow.spec())
    old = accepted_decision(flow, "Old way", tasks=[task])
    accepted_decision(flow, "New way", " Never the old one.", tasks=[task], supersedes=[old])
    accepted_decision(flow, "Elsewhere")

    text = markdown(api, flow.agent, task).content.decode()

    assert "## Decision FM-D2: New way\n\nNew way it is. Never the old one.\n\n" in text
    assert re.findall(r"^## Decision .*$", text, re.MULTILINE) == ["## Decision FM-D2: New way"]


@pytest.mark.django_db
def test_earlier_attempts_failing_tests_and_the_reviewers_reason_are_stated(flow, api):
    task, _ = failed_then_rejected(flow)

    text = markdown(api, flow.agent2, task).content.decode()

    assert re.findall(r"^## Earlier attempt .*$", text, re.MULTILINE) == [
        "## Earlier attempt #2: rejected",
        "## Earlier attempt #1: failed",
    ]
    assert (
        "By fm-agent.\nSummary: second\n"
        "Reviewer fm-reviewer rejected it: AC-2: attach the screenshot\n"
    ) in text
    assert (
        "By fm-agent.\nSummary: first\nFailed gates:\n"
        "- tests-pass (failed): 1 of 2 tests failed: tests/test_claim.py::test_exclusive\n"
        "  - `tests/test_claim.py::test_exclusive` — assert 2 == 1\n"
    ) in text


def test_the_runner_gates_failing_tests_are_listed_under_it():
    attempt = {
        "number": 1,
        "agent": "ada",
        "state": "failed",
        "ended_because": "gates failed — runner: the runner found problems",
        "summary": "",
        "change": {"commit": "abc1230000000000000000000000000000000000"},
        "gates": [
            {
                "gate": "runner",
                "state": "failed",
                "summary": "the runner found problems at abc1230000000000000000000000000000000000: tests failed",
                "verdict": {"tests": {"tests": 2, "failed": 1, "failing": ["t.py::test_b"]}},
            },
            {"gate": "diff-scope", "state": "passed", "summary": "2 files inside"},
        ],
        "evidence": [],
    }

    assert brief.block("attempt", attempt) == (
        "## Earlier attempt #1: failed\n\nBy ada.\nChange: commit abc1230000000000000000000000000000000000\nFailed gates:\n"
        "- runner (failed): the runner found problems at abc1230000000000000000000000000000000000: tests failed\n"
        "  - `t.py::test_b`\nGates passed: diff-scope\n\n"
    )


@pytest.mark.django_db
def test_the_checkpoint_to_resume_from_is_a_fenced_json_block(flow, api):
    task, first = flow.claimed()
    data = {"step": "tests written", "files": ["a.py"]}
    attempts.attempt_checkpoint_save(attempt=first, actor=flow.agent, data=data, revision=0)
    expire_lease(first)
    attempts.task_claim(agent=flow.agent2)

    text = markdown(api, flow.agent2, task).content.decode()

    saved = Attempt.objects.get(pk=first.pk).checkpoint_at.isoformat()
    assert (
        f"## Checkpoint to resume from (attempt #1, revision 1, saved {saved})\n\n"
        '```json\n{\n  "files": [\n    "a.py"\n  ],\n  "step": "tests written"\n}\n```\n\n'
    ) in text


@pytest.mark.django_db
def test_a_dependencys_outcome_is_stated(flow, api):
    dependency, _ = flow.done(title="Schema")
    task, _ = flow.claimed(depends_on=[dependency])

    text = markdown(api, flow.agent, task).content.decode()

    assert "Depends on: FM-1\n" in text
    assert (
        "## Dependency FM-1: Schema (done)\n\nOutcome: done\nChange: commit abc1230000000000000000000000000000000000\n\n"
        in text
    )


@pytest.mark.django_db
def test_the_footer_has_the_bundle_sha256_and_the_fetch_is_recorded(flow, api):
    task, attempt = flow.claimed(spec=flow.spec())

    text = markdown(api, flow.agent, task).content.decode()

    attempt.refresh_from_db()
    assert text.endswith(f"\n---\nBundle sha256 `{attempt.context_sha256}`.\n")
    assert [(m["id"], m["included"]) for m in attempt.context_manifest] == [
        (task.key, True),
        ("FM-S1", True),
    ]
    footer = len(f"---\nBundle sha256 `{attempt.context_sha256}`.\n")
    assert sum(m["chars"] for m in attempt.context_manifest) + footer == len(text)
    assert attempt.context_fetched_at is not None


@pytest.mark.django_db
def test_max_chars_bounds_the_markdown_and_the_footer_names_what_was_left_out(flow, api):
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec)
    for i in range(5):
        accepted_decision(flow, f"Decision {i}", " " + "x" * 300, specs=[spec])
    full = markdown(api, flow.agent, task).content.decode()
    budget = full.index("## Decision FM-D3") + 200

    text = markdown(api, flow.agent, task, max_chars=budget).content.decode()

    attempt.refresh_from_db()
    assert len(text) <= budget < len(full)
    assert re.findall(r"^## Decision (\S+):", text, re.MULTILINE) == ["FM-D1", "FM-D2"]
    assert text.endswith(
        f"`{attempt.context_sha256}`; budget {budget} characters.\n"
        "Left out by the budget: decision FM-D3, decision FM-D4, decision FM-D5.\n"
    )
    dropped = [m["id"] for m in attempt.context_manifest if not m["included"]]
    assert dropped == ["FM-D3", "FM-D4", "FM-D5"]


@pytest.mark.django_db
def test_no_budget_from_the_task_up_is_exceeded(flow):
    task, _ = failed_then_rejected(flow)
    accepted_decision(flow, "Use SKIP LOCKED", " " + "y" * 120, tasks=[task])
    full = brief.render(context.build(task, current=None, markdown=True))
    smallest = len(brief.render(context.build(task, current=None, max_chars=1, markdown=True)))

    over = [
        budget
        for budget in range(smallest + 5, len(full) + 20, 11)
        if len(brief.render(context.build(task, current=None, max_chars=budget, markdown=True)))
        > budget
    ]

    assert over == []


@pytest.mark.django_db
def test_accept_text_markdown_answers_the_same_brief(flow, api):
    task, _ = flow.claimed(spec=flow.spec())

    response = api(flow.agent).get(
        f"/api/v1/tasks/{task.key}/context/", HTTP_ACCEPT="text/markdown"
    )

    assert (response.status_code, response["Content-Type"]) == (200, "text/markdown; charset=utf-8")
    assert response.content == markdown(api, flow.agent, task).content


@pytest.mark.django_db
def test_another_projects_task_is_a_json_404(flow, other_flow, api):
    theirs, _ = other_flow.claimed()

    response = api(flow.agent).get(
        f"/api/v1/tasks/{theirs.key}/context/?format=markdown", HTTP_ACCEPT="text/markdown"
    )

    assert (response.status_code, response["Content-Type"]) == (404, "application/json")
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_a_lost_lease_is_a_json_409_and_nothing_is_recorded(flow, api):
    task, attempt = flow.claimed()
    expire_lease(attempt)

    response = markdown(api, flow.agent, task)

    assert (response.status_code, response["Content-Type"]) == (409, "application/json")
    assert response.json()["code"] == "lease_lost"
    assert Attempt.objects.get(pk=attempt.pk).context_sha256 == ""


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["format=", "format=json&format=markdown", "format=JSON"])
def test_a_format_other_than_json_or_markdown_given_once_is_a_json_400_and_nothing_is_recorded(
    flow, api, query
):
    task, _ = flow.claimed()
    before = Event.objects.count()

    response = api(flow.agent).get(f"/api/v1/tasks/{task.key}/context/?{query}")

    assert (response.status_code, response["Content-Type"]) == (400, "application/json")
    assert response.json()["fields"] == {"format": ["json or markdown, given once"]}
    assert Event.objects.count() == before


def test_an_attempt_failed_by_a_counted_close_says_so_beside_its_failed_gate():
    # Its pull request closed a third time while a gate had failed: the close ended it.
    why = "its pull request was closed by octocat; 3 closes, 2 free: it counts as failed"
    attempt = {
        "number": 2,
        "agent": "ada",
        "state": "failed",
        "ended_because": why,
        "summary": "",
        "change": {},
        "gates": [{"gate": "tests-pass", "state": "failed", "summary": "1 failed", "verdict": {}}],
        "evidence": [],
    }

    assert brief.block("attempt", attempt).startswith(
        f"## Earlier attempt #2: failed\n\nBy ada. Ended because: {why}\nFailed gates:\n"
        "- tests-pass (failed): 1 failed\n"
    )
