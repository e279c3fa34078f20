"""Context-bundle latency and query count with 1k and then 100k rows of project history.

    uv run python bench/context.py [--fetches 300]

The measured task has its own modest history (earlier attempts with gate runs and
evidence, decisions about it, a checkpoint). Around it the project grows from 1,000 to
100,000 other tasks, attempts, decisions (each concerning a task and the spec) and
evidence rows. Fetches go through the real endpoint (WSGI handler, bearer token) as
the agent holding the task, which also records the fetch. Prints JSON.
"""

import argparse
import io
import json
import statistics
import time

from common import drop_database, percentiles, setup_django, team_project


def grow(project, spec, agent, start: int, stop: int) -> None:
    """Add tasks start..stop-1 with one failed attempt, one evidence row and one decision each."""
    from decisions.models import Decision
    from evidence.models import Evidence
    from tasks.models import Attempt, Task

    batch = 5000
    for low in range(start, stop, batch):
        high = min(stop, low + batch)
        tasks = Task.objects.bulk_create(
            [
                Task(
                    project=project,
                    number=n,
                    key=f"{project.slug}-{n}",
                    title=f"history {n}",
                    state="done",
                    spec=spec,
                )
                for n in range(low, high)
            ]
        )
        attempts = Attempt.objects.bulk_create(
            [
                Attempt(task=t, number=1, agent=agent, state="approved", summary="old work")
                for t in tasks
            ]
        )
        Evidence.objects.bulk_create(
            [
                Evidence(
                    attempt=a,
                    project_id=a.task.project_id,
                    kind="log",
                    file="evidence/00/00/old",
                    sha256="0" * 64,
                    size=1,
                    media_type="text/plain",
                    name="old.log",
                    provenance="agent",
                )
                for a in attempts
            ]
        )
        decisions = Decision.objects.bulk_create(
            [
                Decision(
                    project=project,
                    number=n,
                    key=f"{project.slug}-D{n}",
                    title=f"old decision {n}",
                    context="c",
                    decision="d",
                    state="accepted",
                    proposed_by=agent,
                )
                for n in range(low, high)
            ]
        )
        Decision.tasks.through.objects.bulk_create(
            [
                Decision.tasks.through(decision=d, task=t)
                for d, t in zip(decisions, tasks, strict=True)
            ]
        )


def measure(handler, environ, fetches: int) -> dict:
    from django.db import connection

    def fetch():
        return b"".join(handler(environ(), lambda *a: None))

    for _ in range(20):
        fetch()
    executed = []

    def count(execute, sql, params, many, context):
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            executed.append(((time.perf_counter() - start) * 1000, sql))

    with connection.execute_wrapper(count):
        body = fetch()
    samples = []
    for _ in range(fetches):
        start = time.perf_counter()
        fetch()
        samples.append((time.perf_counter() - start) * 1000)
    bundle = json.loads(body)
    slowest = max(executed)
    return {
        "queries": len(executed),
        "slowest_query_ms": round(slowest[0], 3),
        "slowest_query": slowest[1][:120],
        "bundle_chars": bundle["chars"],
        "items": len(bundle["manifest"]),
        **percentiles(samples),
        "stdev_ms": round(statistics.pstdev(samples), 3),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fetches", type=int, default=300)
    args = parser.parse_args()
    setup_django("context")
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connection
    from knox.models import AuthToken

    from decisions import services as decisions
    from tasks import attempts as task_attempts
    from tasks import review, services

    project, manager, agent, reviewer, spec = team_project("CB", spec_body="# spec\n" * 20)
    project.task_seq = 10  # the measured task is CB-1; history uses numbers from 1000 up
    project.save(update_fields=["task_seq"])
    task = services.task_create(
        project=project,
        actor=manager,
        title="the task",
        spec=spec,
        description="do it\n" * 20,
        max_attempts=10,
    )
    services.task_publish(task=task, actor=manager)
    for n in range(3):  # its own history: three attempts, each through (empty) gates and rejected
        attempt = task_attempts.task_claim(agent=agent, lease_seconds=3600)
        task_attempts.attempt_submit(
            attempt=attempt,
            actor=agent,
            summary=f"try {n}",
            change={"commit": "abcdef1000000000000000000000000000000000"},
        )
        review.task_reject(task=task, actor=reviewer, reason=f"reason {n}")
    for n in range(5):
        d = decisions.decision_propose(
            project=project,
            actor=manager,
            title=f"about the task {n}",
            context="c",
            decision="d" * 200,
            tasks=[task],
        )
        decisions.decision_accept(decision=d, actor=reviewer)
    current = task_attempts.task_claim(agent=agent, lease_seconds=3600)
    task_attempts.attempt_checkpoint_save(
        attempt=current, actor=agent, data={"step": 3}, revision=0
    )
    token = AuthToken.objects.create(user=agent, expiry=None)[1]
    handler = WSGIHandler()

    def environ():
        return {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": f"/api/v1/tasks/{task.key}/context/",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "wsgi.input": io.BytesIO(b""),
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "wsgi.url_scheme": "http",
            "HTTP_HOST": "localhost",
        }

    result = {}
    grow(project, spec, agent, 1000, 2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    result["history_1k"] = measure(handler, environ, args.fetches)
    grow(project, spec, agent, 2000, 101_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    result["history_100k"] = measure(handler, environ, args.fetches)
    result["p50_ratio_100k_to_1k"] = round(
        result["history_100k"]["p50_ms"] / result["history_1k"]["p50_ms"], 3
    )
    result["same_query_count"] = (
        result["history_100k"]["queries"] == result["history_1k"]["queries"]
    )
    result["target"] = {"p50_ratio": 1.3, "same_query_count": True}
    result["meets_target"] = result["p50_ratio_100k_to_1k"] <= 1.3 and result["same_query_count"]
    print(json.dumps(result, indent=2))
    drop_database("context")


if __name__ == "__main__":
    main()
