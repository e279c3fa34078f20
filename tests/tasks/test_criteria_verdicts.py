"""Verdicts per criterion: a reviewer marks each criterion met, not met or not applicable;
approval needs every one met or n/a, and the verdicts reach the next attempt."""

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from projects.errors import Conflict
from projects.models import Event
from tasks import attempts, brief, comments, context
from tasks.models import Attempt
from tasks.review import task_review
from tests.tasks.test_comments import FIRST

JUNIT = (
    b"<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)


@pytest.fixture
def reviewing(flow):
    """In review against the factories' three criteria, AC-1 and AC-2 proven by evidence;
    AC-3 is judged in review."""
    flow.gates({})
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec)
    flow.attach(attempt, JUNIT, kind="junit", name="junit.xml", criteria=["AC-1"])
    flow.attach(attempt, PNG, kind="screenshot", name="queue.png", criteria=["AC-2"])
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})
    attempts.attempt_gates_passed(attempt=attempt)
    task.refresh_from_db()
    return task, Attempt.objects.get(pk=attempt.pk)


PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
    b"\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84"
    b"\x00\x00\x00\x00IEND\xaeB`\x82"
)


def review(flow, task, verdict, criteria=(), reason=""):
    return task_review(
        task=task, actor=flow.reviewer, verdict=verdict, reason=reason, criteria=list(criteria)
    )


def assert_unchanged(task, attempt, events_before):
    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.state, attempt.criteria_verdicts) == ("in_review", "passed", [])
    assert Event.objects.count() == events_before


def test_approval_keeps_each_criterions_verdict_and_who_gave_it(flow, reviewing):
    task, attempt = reviewing

    review(flow, task, "approve", [{"key": "AC-3", "verdict": "met", "note": "reads well"}])

    attempt.refresh_from_db()
    assert attempt.state == "approved"
    assert attempt.criteria_verdicts == [
        {
            "key": "AC-1",
            "check": "tests",
            "verdict": "met",
            "note": "",
            "by": "evidence",
            "gate": "met",
        },
        {
            "key": "AC-2",
            "check": "evidence",
            "verdict": "met",
            "note": "",
            "by": "evidence",
            "gate": "met",
        },
        {
            "key": "AC-3",
            "check": "review",
            "verdict": "met",
            "note": "reads well",
            "by": "reviewer",
            "gate": None,
        },
    ]
    assert Event.objects.get(transition="approve", to_state="approved").extra["criteria"] == {
        "AC-3": "met"
    }


def test_approval_with_a_review_criterion_unmarked_is_refused_and_names_it(flow, reviewing):
    task, attempt = reviewing
    before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        review(flow, task, "approve")

    assert refused.value.message_dict == {
        "criteria": ["mark each criterion judged in review before approving: AC-3"]
    }
    assert_unchanged(task, attempt, before)


def test_approval_with_a_criterion_not_met_is_refused(flow, reviewing):
    task, attempt = reviewing
    before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        review(flow, task, "approve", [{"key": "AC-3", "verdict": "not_met", "note": "x"}])

    assert refused.value.message_dict == {
        "criteria": ["approval needs every criterion met or not applicable; not met: AC-3"]
    }
    assert_unchanged(task, attempt, before)


def test_a_criterion_without_its_proof_blocks_approval_until_the_reviewer_overrules_it(flow):
    flow.gates({})
    task, _ = flow.in_review(spec=flow.spec())  # no evidence at all
    marks = [{"key": "AC-3", "verdict": "met"}]

    with pytest.raises(ValidationError) as refused:
        review(flow, task, "approve", marks)
    review(
        flow,
        task,
        "approve",
        [
            *marks,
            {"key": "AC-1", "verdict": "na", "note": "no code path changed"},
            {"key": "AC-2", "verdict": "met", "note": "seen on the staging site"},
        ],
    )

    assert refused.value.message_dict == {
        "criteria": ["approval needs every criterion met or not applicable; not met: AC-1, AC-2"]
    }
    task.refresh_from_db()
    assert task.state == "done"


def test_overruling_the_evidence_needs_a_note(flow, reviewing):
    task, attempt = reviewing
    before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        review(flow, task, "reject", [{"key": "AC-1", "verdict": "not_met"}], reason="r")

    assert refused.value.message_dict == {
        "criteria[0].note": ["AC-1: overruling the evidence's verdict (met) needs a note"]
    }
    assert_unchanged(task, attempt, before)


def test_a_criterion_marked_not_met_is_reason_enough_to_reject(flow, reviewing):
    task, attempt = reviewing

    review(flow, task, "reject", [{"key": "AC-3", "verdict": "not_met", "note": "names lie"}])

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.end_reason) == ("ready", "not met: AC-3 (names lie)")
    assert Event.objects.get(transition="reject", to_state="ready").reason == (
        "not met: AC-3 (names lie)"
    )


def test_a_rejection_needs_a_reason_or_a_criterion_not_met(flow, reviewing):
    task, attempt = reviewing
    before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        review(flow, task, "reject", [{"key": "AC-3", "verdict": "met"}])

    assert list(refused.value.message_dict) == ["reason"]
    assert_unchanged(task, attempt, before)


@pytest.mark.parametrize(
    ("marks", "errors"),
    [
        (
            [{"key": "AC-9", "verdict": "met"}],
            {"criteria[0].key": ["not a criterion of the pinned version (AC-1, AC-2, AC-3)"]},
        ),
        (
            [{"key": "AC-3", "verdict": "met"}, {"key": "AC-3", "verdict": "na"}],
            {"criteria[1].key": ["AC-3 is marked twice"]},
        ),
        ([{"key": "AC-3", "verdict": "fine"}], {"criteria[0].verdict": ["met, not_met or na"]}),
        (
            [{"key": "AC-3", "verdict": "met", "note": "x" * 10_001}],
            {"criteria[0].note": ["text of at most 10000 characters"]},
        ),
        ("AC-3", {"criteria": ["a list of {key, verdict, note}"]}),
    ],
)
def test_bad_marks_are_refused_by_field_and_nothing_is_kept(flow, reviewing, marks, errors):
    task, attempt = reviewing
    before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        task_review(task=task, actor=flow.reviewer, verdict="approve", reason="", criteria=marks)

    assert refused.value.message_dict == errors
    assert_unchanged(task, attempt, before)


def test_a_decided_attempt_takes_no_second_verdict(flow, reviewing):
    task, attempt = reviewing
    review(flow, task, "approve", [{"key": "AC-3", "verdict": "met"}])
    before = Event.objects.count()

    with pytest.raises(Conflict):
        review(flow, task, "reject", [{"key": "AC-3", "verdict": "not_met", "note": "no"}])

    attempt.refresh_from_db()
    assert [r["verdict"] for r in attempt.criteria_verdicts] == ["met", "met", "met"]
    assert Event.objects.count() == before


def test_the_next_context_lists_the_unmet_criterion_first_and_the_brief_checks_it(flow, reviewing):
    task, _ = reviewing
    review(
        flow,
        task,
        "reject",
        [
            {"key": "AC-3", "verdict": "met"},
            {"key": "AC-1", "verdict": "not_met", "note": "only the agent's own run"},
        ],
    )

    bundle = context.build(task, current=None)
    [earlier] = bundle["attempts"]
    markdown = brief.render(bundle)

    assert [(c["key"], c["verdict"], c["by"]) for c in earlier["criteria"]] == [
        ("AC-1", "not_met", "reviewer"),
        ("AC-2", "met", "evidence"),
        ("AC-3", "met", "reviewer"),
    ]
    assert "- [ ] AC-1 NOT MET — only the agent's own run" in markdown
    assert "- [x] AC-3 met" in markdown
    assert "AC-2 met" not in markdown  # kept as the evidence showed: not the reviewer's word


def test_the_api_takes_criteria_and_shows_them_on_the_attempt(flow, reviewing, api):
    task, attempt = reviewing
    marks = [{"key": "AC-3", "verdict": "met", "note": "reads well"}]

    answer = api(flow.reviewer).post(
        f"/api/v1/tasks/{task.key}/review/",
        {"verdict": "approve", "criteria": marks},
        format="json",
    )
    shown = api(flow.agent).get(f"/api/v1/attempts/{attempt.pk}/").json()["review"]["criteria"]

    assert (answer.status_code, answer.json()["state"]) == (200, "done")
    assert [(c["key"], c["verdict"], c["by"]) for c in shown] == [
        ("AC-1", "met", "evidence"),
        ("AC-2", "met", "evidence"),
        ("AC-3", "met", "reviewer"),
    ]


def test_the_api_refuses_an_unmarked_review_criterion_with_400(flow, reviewing, api):
    task, attempt = reviewing
    before = Event.objects.count()

    answer = api(flow.reviewer).post(
        f"/api/v1/tasks/{task.key}/review/",
        {"verdict": "approve", "criteria": [{"key": "AC-1", "verdict": "met", "extra": 1}]},
        format="json",
    )

    assert answer.status_code == 400
    assert answer.json()["fields"] == {"criteria": ["0: extra: unknown field"]}
    assert_unchanged(task, attempt, before)


def test_the_page_form_marks_criteria_and_a_refusal_keeps_what_was_typed(flow, reviewing, client):
    task, attempt = reviewing
    client.force_login(flow.reviewer)
    url = f"/tasks/{task.key}/review/"

    refused = client.post(url, {"verdict": "approve", "reason": "fine", "note:AC-3": "hm"})
    done = client.post(url, {"verdict": "approve", "criterion:AC-3": "met", "note:AC-3": "ok"})

    page = refused.content.decode()
    assert refused.status_code == 400
    assert "Not recorded: mark each criterion judged in review before approving: AC-3" in page
    assert 'name="note:AC-3" value="hm"' in page and ">fine</textarea>" in page
    assert (done.status_code, done["Location"]) == (302, "/review/")
    attempt.refresh_from_db()
    assert attempt.criteria_verdicts[2] == {
        "key": "AC-3",
        "check": "review",
        "verdict": "met",
        "note": "ok",
        "by": "reviewer",
        "gate": None,
    }


def test_the_task_page_says_which_criteria_to_mark_and_shows_the_verdicts_after(
    flow, reviewing, client
):
    task, _ = reviewing
    client.force_login(flow.reviewer)
    before = client.get(f"/tasks/{task.key}/").content.decode()
    review(flow, task, "reject", [{"key": "AC-3", "verdict": "not_met", "note": "names lie"}])

    after = client.get(f"/tasks/{task.key}/?attempt=1").content.decode()

    assert 'Mark before approving: <a href="#criterion-AC-3">AC-3</a>' in before
    assert before.count('type="radio" form="review-form" name="criterion:AC-1"') == 4
    assert before.count('type="radio" form="review-form" name="criterion:AC-3"') == 3
    row = after[after.index('id="criterion-AC-3"') :]
    assert '<span class="badge bad">not met</span>' in row[:2000]
    assert "names lie" in row[:2000]


def criteria(n: int) -> list[dict]:
    return [
        {"key": f"AC-{i}", "text": f"Criterion {i}.", "proof": {"check": "review"}}
        for i in range(1, n + 1)
    ]


def commented_task(flow, n_criteria: int, n_comments: int):
    """In review against a spec of ``n_criteria`` review criteria, with ``n_comments`` comments."""
    task, attempt = flow.claimed(
        spec=flow.spec(criteria=criteria(n_criteria)), allowed_paths=["tasks/**"]
    )
    flow.attach(attempt, FIRST, kind="diff", name="change.diff")
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})
    attempts.attempt_gates_passed(attempt=attempt)
    for n in range(n_comments):
        comments.comment_add(
            attempt=attempt,
            actor=flow.reviewer,
            path="tasks/queue.py",
            line=2 + n % 2,
            body=f"c{n}",
        )
    return task


def test_the_reviewers_task_page_asks_as_many_queries_for_50_criteria_and_200_comments_as_for_one(
    flow, client, django_assert_num_queries
):
    flow.gates({})
    small = commented_task(flow, 1, 1)
    large = commented_task(flow, 50, 200)
    client.force_login(flow.reviewer)
    client.get(f"/tasks/{small.key}/")  # the first page of a process also fills caches
    with CaptureQueriesContext(connection) as one:
        client.get(f"/tasks/{small.key}/")

    with django_assert_num_queries(len(one.captured_queries)):
        page = client.get(f"/tasks/{large.key}/").content.decode()

    assert page.count('name="note:AC-') == 50
    assert page.count("data-inline-comment=") == 200
