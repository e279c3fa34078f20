"""Landing through the pull request against the GitHub stand-in, beside ``mode: push`` on
the same changes; and a webhook's delivery in to the state it changes.

    uv run python bench/code_host_landing.py [--changes 8] [--suite-seconds 1]
        [--ci-delay 0.2] [--checks-poll 15] [--first-look 1] [--deliveries 20] [--quick]

One origin is built as bench/landing.py builds it (``landing_setup.Origin``: ``main`` with
a suite that sleeps ``--suite-seconds`` in the runner's bubblewrap sandbox, and
``--changes`` independent changes, each on a branch of its own). The same commits are
landed in six runs, each on a fresh project, queued through the real services while the
bench holds the lander lock (submitted, approved; ``landing_setup.queue_approved``), then
landed by ``landing.lander.land``, which verifies each batch in the sandbox:

- ``push``, ``batch_max`` 1: one change per verify run, as through a pull request;
- ``push``, ``batch_max`` 8 (the queue's batching, for scale);
- ``pull_request``: the origin is the stand-in's repository (tests/github_standin, on
  loopback, every exchange checked against GitHub's description), ``main`` protected with
  strict up-to-date and the required checks ``ci`` and ``factory-memory/review``; each
  change is submitted with its branch, so the site's sync opens its pull request. The team's
  CI is played by a thread of the bench: it lists the repository's branches every 20 ms
  and posts the commit status ``ci`` = success on each new head ``--ci-delay`` seconds
  (0.2) after it saw it. It runs three times, on three stand-ins with the same commits:
  the lander looking for the required checks every ``--checks-poll`` seconds from its
  first look (``FACTORY_LANDING_CHECKS_POLL_SECONDS``, 15: how it first looked); again
  after ``--first-look`` seconds (``FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS``, 1), twice
  as far each time up to the poll interval, with no webhook (``pull_request_no_webhooks``:
  how it looked next, and what a team without webhooks gets); and as shipped
  (``pull_request``), the team's CI also delivering GitHub's ``status`` webhook, signed,
  to ``/hooks/github/``, which wakes the lander listening between two looks
  (``FACTORY_LANDING_CHECKS_LISTEN_MS``);
- ``pull_request_merge_queue``: as shipped, on a ``main`` with GitHub's merge queue
  instead of strict (ADR 0042): the stand-in builds a merge group per queued pull request,
  the team's CI posts on its branch as on any other, and the lander judges and vouches for
  each group before the queue merges it.

Approval → landed, per change: from the event that moved its task to ``approved`` to the
one that moved it to ``done`` (every change is approved before the lander starts, so the
early ones also wait for the queue to fill; the same in every mode). p50/p95 over the
landed changes, the lander's wall time and verify runs (``Batch.verify_runs``), and for
``pull_request`` the host calls (the stand-in's recorded exchanges, REST and GraphQL)
made while the changes were submitted and approved, and while they landed, per change.

Webhook in → state changed: ``--deliveries`` tasks of the pull-request project in review,
each with its pull request open; a person closes each on the stand-in, and the bench POSTs
the ``pull_request`` ``closed`` delivery to ``/hooks/github/`` (signed with the project's
webhook secret) through Django's test client, in process: the whole request (middleware,
the signature, keeping the delivery) and, as the embedded default runs it (Celery eager),
``codehosts.jobs.delivery_process_job`` in a thread of its own after the answer, which
re-reads the pull request from the stand-in and withdraws the attempt. Timed from the POST
to the moment the bench, looking every 2 ms, reads the attempt ``released`` in the
database; the answer's own time is given beside it. No broker, no gunicorn.

Needs bubblewrap; the database is a temporary SQLite file. ``--quick``: 4 changes and
10 deliveries. Prints JSON.
"""

import argparse
import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from landing_setup import (
    Origin,
    approval_to_done,
    environment,
    measure_suite,
    new_project,
    p50_p95,
    queue_approved,
    verify_block,
)

REPOSITORY = "octo-org/widgets"
KEY_ENV = "FACTORY_HOST_BENCH_APP_KEY"
HOOK_ENV = "FACTORY_HOST_BENCH_HOOK"
SECRET = "bench webhook secret"
CI_LOOK_SECONDS = 0.02


class TeamCI(threading.Thread):
    """The team's CI: posts the commit status ``ci`` = success on every new head of the
    repository's branches, ``delay`` seconds after it saw it; with ``hook`` (the stand-in's
    address), GitHub's ``status`` delivery of it to the site's ``/hooks/github/`` too,
    signed, through Django's test client in this thread."""

    def __init__(self, world, repo, delay: float, hook: str | None = None):
        super().__init__(daemon=True, name="team-ci")
        self.world, self.repo, self.delay, self.hook = world, repo, delay, hook
        self.stopped = threading.Event()
        self.posted = 0
        self.delivered = Counter()

    def deliver(self, sha: str) -> None:
        from django.test import Client

        body = json.dumps(
            {
                "sha": sha,
                "state": "success",
                "context": "ci",
                "repository": {"full_name": REPOSITORY, "url": f"{self.hook}/repos/{REPOSITORY}"},
            }
        ).encode()
        signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        response = Client().post(
            "/hooks/github/",
            body,
            content_type="application/json",
            HTTP_X_GITHUB_EVENT="status",
            HTTP_X_GITHUB_DELIVERY=f"status-{sha}",
            HTTP_X_HUB_SIGNATURE_256=signature,
        )
        self.delivered[response.status_code] += 1

    def run(self) -> None:
        seen, due = set(), []
        while not self.stopped.is_set():
            now = time.monotonic()
            heads = self.repo.git.git("for-each-ref", "--format=%(objectname)", "refs/heads/")
            for sha in heads.split():
                if sha not in seen:
                    seen.add(sha)
                    due.append((now + self.delay, sha))
            for when, sha in [d for d in due if d[0] <= now]:
                with self.world.lock:
                    self.repo.statuses.append((sha, "ci", "success"))
                self.posted += 1
                if self.hook:
                    self.deliver(sha)
                due.remove((when, sha))
            self.stopped.wait(CI_LOOK_SECONDS)

    def stop(self) -> None:
        from django.db import connection

        self.stopped.set()
        self.join()
        connection.close()  # this thread's, if it delivered


def template(call: str) -> str:
    """``PUT /repos/o/r/pulls/3/merge 200`` → ``PUT /repos/o/r/pulls/{n}/merge``."""
    method, path, _status = call.split(" ")
    path = re.sub(r"/[0-9a-f]{40}", "/{sha}", path)
    return f"{method} {re.sub(r'/[0-9]+', '/{n}', path)}"


def push_run(origin, verify, *, slug: str, batch_max: int, names: list[str]) -> dict:
    """``names`` queued on a fresh project landing by pushing to a copy of the origin."""
    from landing.lander import land
    from landing.models import Batch
    from projects import services as project_services

    origin = origin.copy(slug.lower())
    flow = new_project(slug, origin.url, verify)
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        landing={"mode": "push", "method": "squash", "batch_max": batch_max},
    )
    tasks = queue_approved(flow, origin.commits, names)
    started = time.perf_counter()
    counts = land(flow.project)
    wall = time.perf_counter() - started
    batches = Batch.objects.filter(project=flow.project)
    return figures(tasks, counts, wall, batches) | {"batch_max": batch_max}


def figures(tasks: dict, counts: dict, wall: float, batches) -> dict:
    waits = approval_to_done(tasks.values())
    return {
        "changes": len(tasks),
        "landed": counts["landed"],
        "returned": counts["returned"],
        "approval_to_landed_s": p50_p95(waits),
        "lander_wall_seconds": round(wall, 2),
        "verify_runs": sum(b.verify_runs for b in batches),
        "batches": len(batches),
    }


class Hosted:
    """The stand-in, its repository holding the origin's commits, and a project landing
    through pull requests on it (code host set and mode switched through the services,
    which ask the stand-in)."""

    def __init__(
        self, work: Path, origin, names: list[str], *, folder="github", slug="WID", queue=False
    ):
        from tests.github_standin import app_key
        from tests.github_standin.server import StandIn
        from tests.github_standin.world import Protection, World

        self.slug = slug
        (work / folder).mkdir()
        self.world = World(work / folder, 4242, [app_key()[1]], "factory-memory")
        self.standin = StandIn(self.world).start()
        self.repo = self.world.repository(REPOSITORY)
        subprocess.run(
            ["git", "push", "--quiet", str(self.repo.git.path), "main", *names],
            cwd=origin.bare,
            check=True,
        )
        # Strict, or through GitHub's merge queue (``queue``: merge groups, ADR 0042).
        self.repo.protect(
            "main",
            Protection(
                required_checks=["ci", "factory-memory/review"], strict=not queue, merge_queue=queue
            ),
        )
        self.installation = self.world.install("octo-org", [REPOSITORY])
        os.environ[KEY_ENV] = app_key()[0]
        os.environ[HOOK_ENV] = SECRET

    def project(self, verify) -> None:
        """The project, once the operator lists the stand-in (``FACTORY_CODE_HOST_URLS``)."""
        from projects import services as project_services

        self.flow = new_project(self.slug, f"file://{self.repo.git.path}", verify)
        project_services.project_update(
            project=self.flow.project,
            actor=self.flow.manager,
            code_host={
                "provider": "github",
                "api_url": self.standin.url,
                "repository": REPOSITORY,
                "app_id": 4242,
                "installation_id": self.installation.id,
                "private_key_env": KEY_ENV,
                "webhook_secret_env": HOOK_ENV,
                "issues": None,
            },
        )
        self.flow.project.refresh_from_db()
        project_services.project_update(
            project=self.flow.project,
            actor=self.flow.manager,
            landing={"mode": "pull_request", "method": "squash"},
        )
        self.flow.project.refresh_from_db()

    def calls(self) -> list[str]:
        return self.standin.calls()

    def stop(self) -> None:
        self.standin.stop()


def pull_request_run(
    hosted: Hosted, commits: dict, names: list[str], ci_delay: float, *, webhooks: bool
) -> dict:
    from landing.lander import land
    from landing.models import Batch

    before = len(hosted.calls())
    tasks = queue_approved(hosted.flow, commits, names, branches=True)
    queued = hosted.calls()[before:]
    ci = TeamCI(hosted.world, hosted.repo, ci_delay, hosted.standin.url if webhooks else None)
    ci.start()
    try:
        started = time.perf_counter()
        counts = land(hosted.flow.project)
        wall = time.perf_counter() - started
    finally:
        ci.stop()
    landing = hosted.calls()[before + len(queued) :]
    landed = max(1, counts["landed"])
    merged = sum(1 for pull in hosted.repo.pulls.values() if pull.merged)
    batches = Batch.objects.filter(project=hosted.flow.project)
    return figures(tasks, counts, wall, batches) | {
        "pull_requests_merged": merged,
        "host_calls_per_change_submit_and_approve": round(len(queued) / len(names), 2),
        "host_calls_per_landed_change": round(len(landing) / landed, 2),
        "host_calls_landing_by_kind": dict(Counter(template(c) for c in landing).most_common()),
        "host_calls_not_2xx": sum(1 for c in queued + landing if not c.endswith((" 200", " 201"))),
        "ci_statuses_posted": ci.posted,
        "ci_status_deliveries": dict(ci.delivered),
        "standin_violations": len(hosted.standin.violations),
    }


def delivery(api_url: str, number: int) -> bytes:
    """A ``pull_request`` ``closed`` delivery as GitHub sends it, cut to what is read."""
    return json.dumps(
        {
            "action": "closed",
            "pull_request": {"number": number, "draft": False, "state": "closed"},
            "repository": {"full_name": REPOSITORY, "url": f"{api_url}/repos/{REPOSITORY}"},
        }
    ).encode()


def webhook_run(hosted: Hosted, count: int) -> dict:
    """``count`` tasks in review with open pull requests, each closed by a person, its
    delivery POSTed; seconds from the POST to the attempt read ``released``."""
    from django.test import Client, override_settings

    from codehosts.models import TaskPullRequest
    from tasks import attempts
    from tasks.models import Attempt

    flow, repo = hosted.flow, hosted.repo
    flow.gates({})
    in_review = []
    for n in range(count):
        branch = f"fm/hook-{n}"
        sha = repo.git.commit(branch, {f"hook{n}.py": f"h = {n}\n"}, "hook", start="main")
        _task, attempt = flow.claimed(title=f"Hook {n}")
        attempts.attempt_submit(
            attempt=attempt,
            actor=attempt.agent,
            summary="done",
            change={"commit": sha, "branch": branch},
        )
        number = TaskPullRequest.objects.get(task_id=attempt.task_id).number
        in_review.append((attempt.pk, number))
    client = Client()
    answers, changed, results = [], [], Counter()
    with override_settings(FACTORY_EAGER_BACKGROUND_QUEUES=["codehosts.jobs.delivery_process_job"]):
        for index, (attempt_pk, number) in enumerate(in_review):
            hosted.world.close_pull(repo, number, "ann")
            body = delivery(hosted.standin.url, number)
            signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            started = time.perf_counter()
            response = client.post(
                "/hooks/github/",
                body,
                content_type="application/json",
                HTTP_X_GITHUB_EVENT="pull_request",
                HTTP_X_GITHUB_DELIVERY=f"bench-{index}",
                HTTP_X_HUB_SIGNATURE_256=signature,
            )
            answered = time.perf_counter() - started
            results[response.status_code] += 1
            deadline = started + 30
            while time.perf_counter() < deadline:
                if Attempt.objects.filter(pk=attempt_pk, state="released").exists():
                    changed.append(time.perf_counter() - started)
                    break
                time.sleep(0.002)
            answers.append(answered)
    return {
        "deliveries": count,
        "answers": dict(results),
        "state_changed": len(changed),
        "answer_ms": {k: v and round(v * 1000, 1) for k, v in p50_p95(answers, 4).items()},
        "webhook_in_to_state_changed_ms": {
            k: v and round(v * 1000, 1) for k, v in p50_p95(changed, 4).items()
        },
        "effect": "pull_request closed by a person -> the attempt withdrawn (released)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--changes", type=int, help="approved changes landed per mode (8; --quick 4)"
    )
    parser.add_argument("--suite-seconds", type=float, default=1.0, help="the suite's length (1)")
    parser.add_argument(
        "--ci-delay", type=float, default=0.2, help="seconds the team's CI takes per head (0.2)"
    )
    parser.add_argument(
        "--checks-poll",
        type=float,
        help="FACTORY_LANDING_CHECKS_POLL_SECONDS for the run (the setting's, 15 as shipped)",
    )
    parser.add_argument(
        "--first-look",
        type=float,
        help="FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS for the shipped run (the setting's, 1)",
    )
    parser.add_argument("--deliveries", type=int, help="webhook deliveries timed (20; --quick 10)")
    parser.add_argument("--quick", action="store_true", help="4 changes, 10 deliveries")
    args = parser.parse_args()
    args.changes = args.changes or (4 if args.quick else 8)
    args.deliveries = args.deliveries or (10 if args.quick else 20)

    work = Path(tempfile.mkdtemp(prefix="factory-bench-host-landing-"))
    environment(work)
    from django.conf import settings
    from django.test import override_settings

    if args.checks_poll is None:
        args.checks_poll = settings.FACTORY_LANDING_CHECKS_POLL_SECONDS
    if args.first_look is None:
        args.first_look = settings.FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS
    verify = verify_block(args.suite_seconds)
    names = [f"change{n:02d}" for n in range(args.changes)]
    hosted = None
    try:
        origin = Origin(work, suite_seconds=args.suite_seconds, names=names)
        suite = measure_suite(origin, verify)
        modes = {}
        for batch_max in (1, 8):
            modes[f"push_batch_max_{batch_max}"] = push_run(
                origin, verify, slug=f"P{batch_max}", batch_max=batch_max, names=names
            )
            sys.stderr.write(
                f"push {batch_max}: {json.dumps(modes[f'push_batch_max_{batch_max}'])}\n"
            )
        # Three times through the stand-in, the same commits: the lander looking every
        # --checks-poll seconds from the first look (as it first did); soon, then twice as
        # far each time up to it, with no webhook (as it did next, and as a team without
        # webhooks gets it); and as shipped, the team's CI delivering its status, which
        # wakes the lander listening between two looks.
        # A fourth: as shipped, on a target with GitHub's merge queue (the team's CI runs on
        # each merge group's branch as on any other).
        for label, first_look, webhooks, folder, slug, queue in (
            (
                "pull_request_polled_every_checks_poll",
                args.checks_poll,
                False,
                "github-p",
                "WIP",
                False,
            ),
            ("pull_request_no_webhooks", args.first_look, False, "github-n", "WIN", False),
            ("pull_request", args.first_look, True, "github", "WID", False),
            ("pull_request_merge_queue", args.first_look, True, "github-q", "WIQ", True),
        ):
            if hosted is not None:
                hosted.stop()
            hosted = Hosted(work, origin, names, folder=folder, slug=slug, queue=queue)
            with override_settings(
                FACTORY_CODE_HOST_URLS=[hosted.standin.url],
                FACTORY_LANDING_CHECKS_POLL_SECONDS=args.checks_poll,
                FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS=first_look,
                # A run that goes wrong ends instead of waiting the shipped 30 minutes.
                FACTORY_LANDING_CHECKS_TIMEOUT=120,
            ):
                hosted.project(verify)
                modes[label] = pull_request_run(
                    hosted, origin.commits, names, args.ci_delay, webhooks=webhooks
                )
                sys.stderr.write(f"{label}: {json.dumps(modes[label])}\n")
                if label == "pull_request":
                    webhook = webhook_run(hosted, args.deliveries)
    finally:
        if hosted is not None:
            hosted.stop()
        shutil.rmtree(work, ignore_errors=True)

    problems = [name for name, mode in modes.items() if mode["landed"] != args.changes] + (
        [] if webhook["state_changed"] == args.deliveries else ["webhook"]
    )
    print(
        json.dumps(
            {
                "suite": suite,
                "modes": modes,
                "webhook": webhook,
                "all_landed": not problems,
                "problems": problems,
                "machine": {
                    "cpus": os.cpu_count(),
                    "sandbox": settings.FACTORY_RUNNER_SANDBOX,
                    "database": "sqlite",
                },
                "config": vars(args) | {"ci_look_seconds": CI_LOOK_SECONDS},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
