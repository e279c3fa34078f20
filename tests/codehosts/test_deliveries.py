"""Acting on kept deliveries: each is processed by a job after it is kept, re-reading the
pull request from the host (the payload's word is never taken), so duplicated, reordered
or replayed deliveries come to the same result; another repository's delivery naming a
task acts on nothing; kept deliveries go after their retention."""

import hashlib
import hmac
import json
from datetime import timedelta

from django.utils import timezone

from codehosts import jobs, sync
from codehosts.models import HostDelivery, TaskPullRequest
from tests.codehosts.conftest import NOTHING_MORE
from tests.codehosts.test_pull_requests import BRANCH, submitted
from tests.factories import ProjectFactory
from tests.github_standin.world import Pull

SECRET = "It's a Secret to Everybody"


def deliver(client, github, *, delivery, number=1, repository="octo-org/widgets", **fields):
    body = json.dumps(
        {
            "action": fields.pop("action", "edited"),
            "pull_request": {"number": number, "draft": False, "state": "closed", **fields},
            "repository": {
                "full_name": repository,
                "url": f"{github.url}/repos/{repository}",
            },
        }
    ).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return client.post(
        "/hooks/github/",
        body,
        content_type="application/json",
        HTTP_X_GITHUB_EVENT="pull_request",
        HTTP_X_GITHUB_DELIVERY=delivery,
        HTTP_X_HUB_SIGNATURE_256=signature,
    )


def host_state(repo):
    pull = repo.pulls[1]
    return (pull.title, pull.body, pull.draft, pull.state, len(repo.checks), len(repo.comments))


def test_a_delivery_is_processed_from_the_hosts_word_not_the_payloads(
    hosted, repo, github, client, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    _task, _, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    repo.pulls[1].title = "someone renamed it"
    before = host_state(repo)

    with django_capture_on_commit_callbacks(execute=True):
        response = deliver(client, github, delivery="d-1", title="forged", draft=True)

    delivery = HostDelivery.objects.get(delivery_id="d-1")
    assert response.status_code == 202
    assert (delivery.result, delivery.error) == ("WID-1: pull request #1", "")
    assert delivery.processed_at is not None
    # The site's truth put back; the payload's "closed" and "forged" changed nothing.
    assert host_state(repo) == ("WID-1: Exclusive claims", *before[1:])


def test_duplicated_reordered_and_replayed_deliveries_come_to_the_same_result(
    hosted, repo, github, client, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    submitted(hosted, repo, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        deliver(client, github, delivery="d-2", action="ready_for_review")
    once = host_state(repo)

    with django_capture_on_commit_callbacks(execute=True):
        again = deliver(client, github, delivery="d-2", action="ready_for_review")
        deliver(client, github, delivery="d-1", action="opened")  # older, arriving late
        deliver(client, github, delivery="d-3", action="ready_for_review")  # the same body again

    assert again.status_code == 200
    assert host_state(repo) == once
    assert sorted(HostDelivery.objects.values_list("delivery_id", "result")) == [
        ("d-1", "WID-1: pull request #1"),
        ("d-2", "WID-1: pull request #1"),
        ("d-3", "WID-1: pull request #1"),
    ]


def test_another_repositorys_delivery_naming_this_projects_task_acts_on_nothing(
    hosted, repo, github, installation, client, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    task, _, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    gadgets = github.world.repository("octo-org/gadgets")
    gadgets.git.commit("main", {"README.md": "gadgets\n"}, "start")
    gadgets.git.commit(BRANCH, {"x.py": "x\n"}, "x", start="main")
    installation.repositories.append("octo-org/gadgets")
    ProjectFactory(
        slug="GAD", code_host={**hosted.project.code_host, "repository": "octo-org/gadgets"}
    )
    # Someone's pull request there claims to be WID-1's.
    gadgets.pulls[1] = Pull(
        1, "PR_g1", BRANCH, "main", "x", "<!-- factory-memory:task WID-1 -->", False, "mallory"
    )
    before, link = host_state(repo), TaskPullRequest.objects.get(task=task)

    with django_capture_on_commit_callbacks(execute=True):
        deliver(client, github, delivery="g-1", repository="octo-org/gadgets")

    delivery = HostDelivery.objects.get(delivery_id="g-1")
    assert (delivery.project.slug, delivery.result) == (
        "GAD",
        "pull request #1 is no task's of GAD",
    )
    assert host_state(repo) == before
    assert (gadgets.pulls[1].title, len(gadgets.checks), gadgets.comments) == ("x", 0, [])
    assert TaskPullRequest.objects.get(task=task).posted == link.posted


def test_a_delivery_the_host_could_not_be_asked_about_is_processed_by_the_sweep(
    hosted, repo, github, client, monkeypatch, settings, django_capture_on_commit_callbacks
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    settings.FACTORY_CODE_HOST_RETRIES = 0
    submitted(hosted, repo, django_capture_on_commit_callbacks)
    github.fail("502", count=100, match="GET /repos/octo-org/widgets/pulls/1")

    with django_capture_on_commit_callbacks(execute=True):
        response = deliver(client, github, delivery="d-1")

    delivery = HostDelivery.objects.get(delivery_id="d-1")
    assert response.status_code == 202
    assert (delivery.processed_at, delivery.result, delivery.error) == (
        None,
        "",
        "Server Error (502)",
    )
    github.faults.clear()
    assert sync.hosts_reconcile()["deliveries_retried"] == 1
    delivery.refresh_from_db()
    assert (delivery.result, delivery.error) == ("WID-1: pull request #1", "")


def test_kept_deliveries_are_deleted_after_their_retention(db, settings):
    settings.FACTORY_CODE_HOST_DELIVERY_KEEP_DAYS = 14
    project = ProjectFactory()
    now = timezone.now()
    for name, age in (("old", 15), ("kept", 13)):
        HostDelivery.objects.create(
            provider="github",
            delivery_id=name,
            event="pull_request",
            project=project,
            body_sha256="0" * 64,
            received_at=now - timedelta(days=age),
        )

    assert sync.deliveries_prune(now=now) == 1
    assert list(HostDelivery.objects.values_list("delivery_id", flat=True)) == ["kept"]


def test_the_sweep_runs_on_the_reconcilers_beat_and_prunes_and_reconciles(db, settings):
    settings.FACTORY_CODE_HOST_DELIVERY_KEEP_DAYS = 14
    HostDelivery.objects.create(
        provider="github",
        delivery_id="old",
        event="pull_request",
        project=ProjectFactory(),
        body_sha256="0" * 64,
        received_at=timezone.now() - timedelta(days=15),
    )

    assert jobs.hosts_sweep_job.delay().get() == {
        "deliveries_pruned": 1,
        "pull_requests_synced": 0,
        "pull_requests_failed": 0,
        "deliveries_retried": 0,
        **NOTHING_MORE,
    }
    assert settings.CELERY_BEAT_SCHEDULE["code-hosts"] == {
        "task": "codehosts.jobs.hosts_sweep_job",
        "schedule": settings.CELERY_BEAT_SCHEDULE["reconcile"]["schedule"],
    }
