"""Render time of the task page with 200 evidence items, of a task page with one and with 200
line comments, of the decision log with 10k decisions, and of the plan page with 50 and 500
unfinished tasks in dependency chains.

    uv run python bench/pages.py [--renders 100] [--only plan]

Pages are rendered in-process through Django's full stack (middleware, session login,
templates) on PostgreSQL; prints p50/p95 in ms and the query count of each page.
"""

import argparse
import json
import time

from common import drop_database, percentiles, setup_django, team_project

JUNIT = (
    "<testsuite tests='3'><testcase classname='tests.test_claim' name='test_a'/>"
    "<testcase classname='tests.test_claim' name='test_b'><failure message='boom {n}'>trace {n}</failure></testcase>"
    "<testcase classname='tests.test_claim' name='test_c'/></testsuite>"
)
DIFF = (
    "diff --git a/tasks/m{n}.py b/tasks/m{n}.py\n--- a/tasks/m{n}.py\n+++ b/tasks/m{n}.py\n@@ -1,3 +1,3 @@\n"
    " def f():\n-    return {n}\n+    return {n} + 1\n # end\n"
)


TOPICS = [
    f"{a} {b}"
    for a in ("lease", "claim", "gate", "evidence", "review")
    for b in (
        "expiry",
        "ordering",
        "retries",
        "storage",
        "limits",
        "audit",
        "tokens",
        "search",
        "budget",
        "locking",
    )
]


def build(demo_size: int):
    from django.core.files.base import ContentFile

    from decisions.models import Decision
    from demo import artifacts
    from evidence.services import evidence_attach
    from tasks import attempts, services

    project, manager, agent, reviewer, spec = team_project("PB", spec_body="# spec")
    task = services.task_publish(
        task=services.task_create(project=project, actor=manager, title="busy task", spec=spec),
        actor=manager,
    )
    attempt = attempts.task_claim(agent=agent, lease_seconds=3600)
    shot = artifacts.screenshot()
    for n in range(demo_size):
        kind, content, name = [
            ("junit", JUNIT.format(n=n).encode(), f"junit-{n}.xml"),
            ("diff", DIFF.format(n=n).encode(), f"change-{n}.diff"),
            ("log", f"line {n}\n".encode() * 50, f"run-{n}.log"),
            ("screenshot", shot, f"shot-{n}.png"),
            ("note", f"note {n}\n".encode(), f"note-{n}.md"),
        ][n % 5]
        evidence_attach(
            attempt=attempt,
            actor=agent,
            file=ContentFile(content, name=name),
            kind=kind,
            criteria=["AC-1"],
        )
    attempts.attempt_submit(
        attempt=attempt,
        actor=agent,
        summary="many files",
        change={"commit": "abcdef1000000000000000000000000000000000"},
    )

    batch = []
    for n in range(1, 10_001):
        batch.append(
            Decision(
                project=project,
                number=n,
                key=f"PB-D{n}",
                title=f"Decision {n} about claims and leases",
                context="Agents claim tasks under leases " * 3,
                decision=f"Do thing {n}",
                consequences="Fewer lost tasks.",
                state="accepted" if n % 3 else "proposed",
                proposed_by=manager,
            )
        )
    Decision.objects.bulk_create(batch, batch_size=2000)
    links = Decision.specs.through
    links.objects.bulk_create(
        [
            links(decision_id=d, spec_id=spec.pk)
            for d in Decision.objects.filter(project=project).values_list("pk", flat=True)[:2000]
        ]
    )
    project.decision_seq = 10_000
    project.save(update_fields=["decision_seq"])
    return task, reviewer, (project, manager, agent)


def commented(project, manager, agent, reviewer, criteria: int = 1):
    """A task in review whose diff has lines 1-3 of tasks/queue.py, with one comment, held to
    a spec of ``criteria`` criteria judged in review."""
    from django.core.files.base import ContentFile

    from decisions.services import spec_create, spec_version_accept
    from evidence.services import evidence_attach
    from tasks import attempts, comments, services

    spec = spec_create(
        project=project,
        actor=manager,
        title=f"{criteria} criteria",
        body="# Review\n",
        criteria=[
            {"key": f"AC-{i}", "text": f"Criterion {i}.", "proof": {"check": "review"}}
            for i in range(1, criteria + 1)
        ],
    )
    spec_version_accept(version=spec.versions.get(), actor=manager)
    task = services.task_publish(
        task=services.task_create(project=project, actor=manager, title="commented", spec=spec),
        actor=manager,
    )
    attempt = attempts.task_claim(agent=agent, project=project, lease_seconds=3600)
    diff = DIFF.format(n=0).replace("tasks/m0.py", "tasks/queue.py").encode()
    evidence_attach(
        attempt=attempt, actor=agent, file=ContentFile(diff, name="change.diff"), kind="diff"
    )
    attempts.attempt_submit(attempt=attempt, actor=agent, summary="s", change={"commit": "c0ffee"})
    attempt.refresh_from_db()
    if attempt.state == "checking":
        attempts.attempt_gates_passed(attempt=attempt)
    comments.comment_add(attempt=attempt, actor=reviewer, path="tasks/queue.py", line=2, body="1")
    return task, attempt


def planned(slug: str, size: int):
    """A project with 20 tasks done through the services (the weights' and the forecast's
    history) and ``size`` unfinished ones in chains of 10, every third also waiting on the
    task 7 before it, so chains branch and join. Returns its manager."""
    from tasks import attempts, review, services

    project, manager, agent, reviewer, _ = team_project(slug, spec_body="# plan")
    for n in range(20):
        task = services.task_publish(
            task=services.task_create(
                project=project, actor=manager, title=f"done {n}", labels=[("api", "ui")[n % 2]]
            ),
            actor=manager,
        )
        attempt = attempts.task_claim(agent=agent, project=project, lease_seconds=3600)
        attempts.attempt_submit(attempt=attempt, actor=agent, summary="s", change={"commit": "c"})
        attempt.refresh_from_db()
        if attempt.state == "checking":
            attempts.attempt_gates_passed(attempt=attempt)
        task.refresh_from_db()
        review.task_approve(task=task, actor=reviewer, criteria=[])
    tasks = []
    for n in range(size):
        depends_on = [tasks[-1]] if n % 10 else []
        if n >= 7 and n % 3 == 0:
            depends_on.append(tasks[n - 7])
        task = services.task_create(
            project=project,
            actor=manager,
            title=f"Planned work item {n} of the roadmap",
            labels=[("api", "ui", "docs")[n % 3]],
            depends_on=list({t.pk: t for t in depends_on}.values()),
        )
        if n % 2:
            task = services.task_publish(task=task, actor=manager)
        tasks.append(task)
    return manager


def measure_plans(client_class, renders: int) -> dict:
    pages = {}
    for size in (50, 500):
        slug = f"PL{size}"
        manager = planned(slug, size)
        client = client_class()
        client.force_login(manager)
        pages[f"plan_page_{size}_tasks"] = measure(client, f"/projects/{slug}/plan/", renders)
    return pages


def measure(client, path: str, renders: int) -> dict:
    from django.db import connection

    for _ in range(3):
        assert client.get(path).status_code == 200, path
    count = []

    def counter(execute, sql, params, many, context):
        count.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        client.get(path)
    samples = []
    for _ in range(renders):
        start = time.perf_counter()
        client.get(path)
        samples.append((time.perf_counter() - start) * 1000)
    return {"path": path, "queries": len(count), **percentiles(samples)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--renders", type=int, default=100)
    parser.add_argument(
        "--only", choices=["all", "plan"], default="all", help="plan: only the plan pages"
    )
    args = parser.parse_args()
    setup_django("pages")
    from django.db import connection
    from django.test import Client

    from tasks import comments

    if args.only == "plan":
        pages = measure_plans(Client, args.renders)
        report(pages)
        return

    task, reviewer, (project, manager, agent) = build(200)
    talked, _ = commented(project, manager, agent, reviewer, criteria=1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    client = Client()
    client.force_login(reviewer)
    one_comment = measure(client, f"/tasks/{talked.key}/", args.renders)
    talked, attempt = commented(project, manager, agent, reviewer, criteria=50)
    for n in range(199):
        comments.comment_add(
            attempt=attempt, actor=reviewer, path="tasks/queue.py", line=1 + n % 3, body=f"c{n}"
        )
    pages = {
        "task_page_200_evidence": measure(client, f"/tasks/{task.key}/", args.renders),
        # The reviewer's page, with a verdict control per criterion and comments inline.
        "task_page_1_comment_1_criterion": one_comment,
        "task_page_200_comments_50_criteria": measure(
            client, f"/tasks/{talked.key}/", args.renders
        ),
        "decision_log_10k": measure(client, "/decisions/", args.renders),
        # Each topic is 1 in 50 decisions: the search matches 200 of the 10,000.
        "decision_log_10k_search": measure(client, "/decisions/?q=lease+expiry", args.renders),
        "decision_log_10k_filtered": measure(
            client, "/decisions/?state=accepted&spec=PB-S1", args.renders
        ),
        **measure_plans(Client, args.renders),
    }
    report(pages)


def report(pages: dict) -> None:
    result = {"pages": pages, "target": {"p95_ms": 250}}
    result["meets_target"] = all(page["p95_ms"] <= 250 for page in pages.values())
    print(json.dumps(result, indent=2))
    drop_database("pages")


if __name__ == "__main__":
    main()
