"""A claim in a project that avoids overlap prefers tasks apart from work in progress:
fewer conflicts when the work lands (docs/landing.md)."""

import pytest

from projects.models import Event
from projects.paths import paths_may_overlap
from tasks import attempts


@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        (["calc.py"], ["calc.py"], True),
        (["calc.py"], ["util.py"], False),
        (["src/**"], ["src/calc.py"], True),
        (["src/**"], ["docs/**"], False),
        (["src/a/**"], ["src/**"], True),
        (["docs/*.md"], ["docs/index.md"], True),
        (["docs/*.md"], ["src/index.md"], False),
        ([], ["anything.py"], True),
    ],
)
def test_paths_may_overlap_is_conservative(first, second, overlap):
    assert paths_may_overlap(first, second) is overlap
    assert paths_may_overlap(second, first) is overlap


def avoiding(flow, on=True):
    flow.project.claim_avoid_overlap = on
    flow.project.save(update_fields=["claim_avoid_overlap"])


def claim(flow, agent):
    return attempts.task_claim(agent=agent, project=flow.project, lease_seconds=300)


def test_a_claim_passes_over_a_task_that_overlaps_work_in_progress_and_says_so(flow, api):
    avoiding(flow)
    flow.claimed(title="Busy", allowed_paths=["calc.py"], priority=9)
    overlapping = flow.ready(title="Also calc", allowed_paths=["calc.py"], priority=5)
    apart = flow.ready(title="Docs", allowed_paths=["docs/**"], priority=1)

    response = api(flow.agent2).post(
        "/api/v1/tasks/claim/", {"project": flow.project.slug}, format="json"
    )

    assert response.status_code == 201
    body = response.json()
    assert body["task"]["key"] == apart.key
    assert body["skipped_for_overlap"] == [overlapping.key]
    event = Event.objects.get(task=apart, transition="claim")
    assert event.extra["skipped_for_overlap"] == [overlapping.key]


def test_when_every_task_overlaps_the_best_is_claimed_as_usual(flow):
    avoiding(flow)
    flow.claimed(title="Busy", allowed_paths=["calc.py"], priority=9)
    best = flow.ready(title="Also calc", allowed_paths=["calc.py"], priority=5)

    attempt = claim(flow, flow.agent2)

    assert attempt.task_id == best.pk
    assert attempt.skipped_for_overlap == []


def test_without_the_setting_a_claim_takes_the_best_task(flow):
    avoiding(flow, on=False)
    flow.claimed(title="Busy", allowed_paths=["calc.py"], priority=9)
    best = flow.ready(title="Also calc", allowed_paths=["calc.py"], priority=5)
    flow.ready(title="Docs", allowed_paths=["docs/**"], priority=1)

    attempt = claim(flow, flow.agent2)

    assert attempt.task_id == best.pk
    assert attempt.skipped_for_overlap == []


def test_the_setting_follows_landing_when_unset(flow):
    flow.project.landing = {"mode": "push", "method": "squash", "batch_max": 4, "target_branch": ""}
    assert flow.project.claim_avoid_overlap is None
    assert flow.project.avoids_overlap is True
    flow.project.landing["mode"] = "off"
    assert flow.project.avoids_overlap is False
