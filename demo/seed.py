"""Build the demo project through the services, so it has the history real use leaves.

Every state, event and evidence file below is made the way the product makes them:
by the same services the API and the UI call. Running it on a database that has the
demo project already adds nothing.
"""

from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.db import transaction

from decisions import services as decisions
from demo import artifacts
from demo.runner_demo import seed_runner_demo
from evidence import services as evidence
from projects import services as project_services
from projects.models import Project
from projects.roles import Role
from tasks import attempts, review, services

SLUG = "FM"
PASSWORD = "factory-demo"
USERS = {
    "maria": [Role.MANAGER],
    "rita": [Role.REVIEWER],
    "ravi": [Role.REVIEWER],
    "ada": [Role.AGENT],
    "alan": [Role.AGENT],
    "vera": [Role.VERIFIER],
}
CLAIM_SPEC_V1 = """# Claiming tasks

An agent asks for work and gets the best claimable task under a lease.

- Higher priority first, then older first.
- A task whose dependencies are not done is never handed out.
- Two agents never hold the same task.
"""
CLAIM_SPEC_V2 = (
    CLAIM_SPEC_V1
    + """- A lease lasts five minutes unless the agent asks for another length
  (1 s to 1 h) and is renewed by each heartbeat.
"""
)
CLAIM_CRITERIA = [
    {
        "key": "AC-1",
        "text": "Claims follow priority, then age, and respect dependencies.",
        "proof": {"check": "tests", "select": "tests/test_claim_demo.py::*"},
    },
    {
        "key": "AC-2",
        "text": "The queue after two claims is shown to a person.",
        "proof": {"check": "evidence", "kind": "screenshot"},
    },
    {
        "key": "AC-3",
        "text": "The code is readable and matches the spec.",
        "proof": {"check": "review"},
    },
]
UPLOAD_SPEC = """# Evidence upload

Agents and verifiers attach files to an attempt. Files are hashed while they
stream to disk and stored once per SHA-256.
"""
CLAIM_QUEUE_BEFORE = {
    "tasks/claimqueue.py": (
        "def claim(tasks, done):\n"
        "    ready = [t for t in tasks if t['state'] == 'ready']\n"
        "    ready.sort(key=lambda t: -t['priority'])\n"
        "    return ready[0] if ready else None\n"
    ),
}
CLAIM_QUEUE_AFTER = {
    "tasks/claimqueue.py": (
        "def claim(tasks, done):\n"
        "    ready = [t for t in tasks if t['state'] == 'ready']\n"
        "    ready = [t for t in ready if all(d in done for d in t.get('depends_on', ()))]\n"
        "    ready.sort(key=lambda t: (-t['priority'], t['created']))\n"
        "    if not ready:\n"
        "        return None\n"
        "    ready[0]['state'] = 'claimed'\n"
        "    return ready[0]\n"
    ),
}


class Demo:
    """The demo project's cast, specs and artifacts while it is being built."""

    def __init__(self, out):
        self.out = out
        self.broken = artifacts.run_suite(broken=True)
        self.good = artifacts.run_suite(broken=False)
        self.diff = artifacts.git_diff(CLAIM_QUEUE_BEFORE, CLAIM_QUEUE_AFTER)
        outside = {**CLAIM_QUEUE_AFTER, "factory_site/settings.py": "CLAIM_LIMIT = 10\n"}
        self.diff_outside = artifacts.git_diff(
            {**CLAIM_QUEUE_BEFORE, "factory_site/settings.py": "CLAIM_LIMIT = 5\n"}, outside
        )

    def users(self):
        User = get_user_model()
        admin, created = User.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            admin.set_password(PASSWORD)
            admin.save()
        self.admin = admin
        for username, roles in USERS.items():
            user, created = User.objects.get_or_create(
                username=username, defaults={"email": f"{username}@example.invalid"}
            )
            if created:
                user.set_password(PASSWORD)
                user.is_staff = Role.MANAGER in roles
                user.save()
            for role in roles:
                project_services.membership_grant(user=user, project=self.project, role=role)
            setattr(self, username, user)

    def memberships(self):
        """Each demo user with each of their roles."""
        return [(getattr(self, name), role) for name, roles in USERS.items() for role in roles]

    def attach(self, attempt, actor, content: bytes, kind: str, name: str, criteria=()):
        return evidence.evidence_attach(
            attempt=attempt,
            actor=actor,
            file=ContentFile(content, name=name),
            kind=kind,
            criteria=criteria,
        )

    def check(self, attempt):
        """Run the project's gates on a submitted attempt, here and now, as a worker would."""
        for run in attempt.gate_runs.order_by("gate"):
            evidence.gate_run_execute(run=run)

    def task(self, title, **kwargs):
        return services.task_create(project=self.project, actor=self.maria, title=title, **kwargs)

    def claim(self, agent, **kwargs):
        return attempts.task_claim(agent=agent, project=self.project, lease_seconds=3600, **kwargs)

    def submit(self, attempt, summary, commit, usage=None):
        return attempts.attempt_submit(
            attempt=attempt,
            actor=attempt.agent,
            summary=summary,
            change={"commit": commit, "branch": f"agent/{attempt.task.key.lower()}"},
            idempotency_key=f"demo-{attempt.task.key}-{attempt.number}",
            usage=usage,
        )


def _usage(model, input_tokens, output_tokens, cost_usd, wall_seconds) -> dict:
    """What an agent reports of an attempt (self-reported; the dashboard sums it)."""
    return {
        "model": model,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost_usd,
        "wall_seconds": wall_seconds,
    }


def seed(out) -> bool:
    """Create the demo project; return False (and add nothing) if it exists already."""
    if Project.objects.filter(slug=SLUG).exists():
        return False
    demo = Demo(out)
    with transaction.atomic():
        demo.project = project_services.project_create(
            slug=SLUG,
            name="Factory Memory (demo)",
            repository_url="https://git.example.invalid/factory-memory.git",
            gate_policy={
                "required-evidence": {},
                "tests-pass": {},
                "coverage": {"threshold": 0.8},
                "diff-scope": {},
                "spec-current": {},
            },
        )
        demo.users()
        _specs_and_decisions(demo)
        _tasks(demo)
    seed_runner_demo(demo, out)
    return True


def _specs_and_decisions(demo: Demo) -> None:
    maria, rita = demo.maria, demo.rita
    demo.claim_spec = decisions.spec_create(
        project=demo.project,
        actor=maria,
        title="Claiming tasks",
        body=CLAIM_SPEC_V1,
        criteria=CLAIM_CRITERIA,
    )
    decisions.spec_version_accept(version=demo.claim_spec.versions.get(number=1), actor=maria)
    demo.upload_spec = decisions.spec_create(
        project=demo.project,
        actor=maria,
        title="Evidence upload",
        body=UPLOAD_SPEC,
        criteria=[
            {
                "key": "AC-1",
                "text": "Uploads are hashed while streaming.",
                "proof": {"check": "tests", "select": "tests/test_upload*"},
            },
            {
                "key": "AC-2",
                "text": "A reviewer has judged the upload page.",
                "proof": {"check": "review"},
            },
        ],
    )
    decisions.spec_version_accept(version=demo.upload_spec.versions.get(number=1), actor=maria)
    decisions.spec_version_create(
        spec=demo.upload_spec,
        actor=maria,
        body=UPLOAD_SPEC + "\nUploads over the size limit are refused with 413.\n",
        criteria=[
            {
                "key": "AC-1",
                "text": "Uploads are hashed while streaming.",
                "proof": {"check": "tests", "select": "tests/test_upload*"},
            },
            {
                "key": "AC-2",
                "text": "Oversize uploads get 413 and leave no file.",
                "proof": {"check": "tests", "select": "tests/test_upload*::test_oversize*"},
            },
        ],
    )

    d1 = decisions.decision_propose(
        project=demo.project,
        actor=maria,
        title="Claim tasks under a table lock",
        context="Two agents must never get the same task.",
        decision="Take LOCK TABLE tasks IN EXCLUSIVE MODE around each claim.",
        consequences="Claims are serial; simple to reason about.",
        alternatives=[{"option": "Advisory locks", "reason": "easy to leak on crashes"}],
        specs=[demo.claim_spec],
    )
    decisions.decision_accept(decision=d1, actor=rita, reason="Safe first version.")
    d2 = decisions.decision_propose(
        project=demo.project,
        actor=maria,
        title="Claim with SELECT … FOR UPDATE SKIP LOCKED",
        context="The table lock serialises all agents; at 16 agents claims queue up.",
        decision="Pick the candidate row with FOR UPDATE SKIP LOCKED inside the claim transaction.",
        consequences="Agents claim in parallel; SQLite serialises writers instead.",
        alternatives=[
            {"option": "Keep the table lock", "reason": "claims/s flat beyond 2 agents"},
            {"option": "Redis queue", "reason": "a second source of truth"},
        ],
        supersedes=[d1],
        specs=[demo.claim_spec],
    )
    decisions.decision_accept(decision=d2, actor=rita, reason="Measured 4x more claims/s.")
    d3 = decisions.decision_propose(
        project=demo.project,
        actor=rita,
        title="Order claims by priority, then age",
        context="SKIP LOCKED alone hands out tasks in physical order.",
        decision="ORDER BY priority DESC, created_at, id before SKIP LOCKED LIMIT 1.",
        consequences="Urgent work goes first; equal work goes oldest first.",
        alternatives=[{"option": "Random order", "reason": "starves old tasks"}],
        supersedes=[d2],
        specs=[demo.claim_spec],
    )
    decisions.decision_accept(decision=d3, actor=maria, reason="Agreed in planning.")
    d4 = decisions.decision_propose(
        project=demo.project,
        actor=rita,
        title="Store evidence files as database BLOBs",
        context="Evidence must survive; the database is backed up.",
        decision="Keep evidence bytes in a bytea column.",
        alternatives=[{"option": "Content-addressed files in Django storage", "reason": ""}],
        specs=[demo.upload_spec],
    )
    decisions.decision_reject(
        decision=d4,
        actor=maria,
        reason="1 GiB uploads would bloat the database and its backups; use storage by SHA-256.",
    )
    d5 = decisions.decision_propose(  # a reviewer proposes; only a manager may amend a spec
        project=demo.project,
        actor=rita,
        title="Leases default to five minutes",
        context="Agents that die keep tasks until their lease runs out.",
        decision="A claim's lease defaults to 300 s, bounded to 1 s…1 h, renewed by heartbeats.",
        consequences="A dead agent's task is claimable within five minutes.",
        amendments=[
            {
                "spec": demo.claim_spec,
                "body": CLAIM_SPEC_V2,
                "criteria": [
                    *CLAIM_CRITERIA,
                    {
                        "key": "AC-4",
                        "text": "The lease length and its bounds are documented for agents.",
                        "proof": {"check": "review"},
                    },
                ],
            }
        ],
    )
    decisions.decision_accept(decision=d5, actor=maria, reason="Amends FM-S1 to v2.")


def _tasks(demo: Demo) -> None:
    ada, alan, rita, vera, maria = demo.ada, demo.alan, demo.rita, demo.vera, demo.maria
    paths = ["tasks/**", "tests/**"]

    # FM-1: failed its gates, then was rejected with a reason, then approved. The gates
    # below are the real ones, reading the real artifacts.
    claim_task = demo.task(
        "Claim endpoint honours priority and dependencies",
        description="Implement the claim queue described in FM-S1.",
        spec=demo.claim_spec,
        priority=5,
        labels=["backend", "api"],
        allowed_paths=paths,
    )
    services.task_publish(task=claim_task, actor=maria)
    first = demo.claim(ada)
    demo.attach(first, ada, demo.broken.junit, "junit", "junit.xml", ["AC-1"])
    demo.attach(first, ada, demo.broken.coverage, "coverage", "coverage.xml")
    demo.attach(first, ada, demo.diff, "diff", "change.diff")
    demo.attach(first, ada, demo.broken.log, "log", "pytest.log")
    demo.submit(
        first,
        "Claim queue with priority ordering.",
        "3f1c2a7",
        usage=_usage("sonnet-4.5", 182_000, 9_400, "1.21", 840),
    )
    demo.check(first)  # tests-pass fails (one test fails) and required-evidence (no screenshot)
    second = demo.claim(alan)
    attempts.attempt_checkpoint_save(
        attempt=second,
        actor=alan,
        revision=0,
        data={"step": "fix dependency filter", "notes": "attempt 1 ignored depends_on"},
    )
    demo.attach(second, alan, demo.good.junit, "junit", "junit.xml", ["AC-1"])
    demo.attach(second, alan, demo.good.coverage, "coverage", "coverage.xml")
    demo.attach(second, alan, demo.diff, "diff", "change.diff")
    demo.attach(second, alan, artifacts.screenshot(), "screenshot", "queue.png", ["AC-2"])
    demo.submit(
        second,
        "Filter out tasks with open dependencies.",
        "8b9e0d1",
        usage=_usage("gpt-5", 240_500, 14_200, "0.74", 1_310),
    )
    demo.check(second)
    review.task_review(
        task=claim_task,
        actor=rita,
        verdict="reject",
        reason="AC-1 rests on the agent's own test run only; attach the CI report so it is authoritative.",
        criteria=[
            {"key": "AC-1", "verdict": "not_met", "note": "no CI report: the agent's run only"},
            {"key": "AC-2", "verdict": "met"},
            {"key": "AC-3", "verdict": "met"},
        ],
    )
    third = demo.claim(ada)
    demo.attach(third, ada, demo.diff, "diff", "change.diff")
    demo.attach(third, ada, artifacts.screenshot(), "screenshot", "queue.png", ["AC-2"])
    demo.attach(third, ada, demo.good.log, "log", "pytest.log")
    demo.attach(third, vera, demo.good.junit, "junit", "ci-junit.xml", ["AC-1"])
    demo.attach(third, vera, demo.good.coverage, "coverage", "ci-coverage.xml")
    demo.submit(
        third,
        "Attach the CI run requested in review.",
        "c41d5e9",
        usage=_usage("sonnet-4.5", 64_000, 2_100, "0.38", 260),
    )
    demo.check(third)
    review.task_approve(
        task=claim_task,
        actor=rita,
        reason="All criteria proven; CI evidence attached.",
        criteria=[
            {"key": "AC-3", "verdict": "met", "note": "reads like the spec"},
            {"key": "AC-4", "verdict": "met", "note": "docs/agents.md has the bounds"},
        ],
    )

    # FM-2: passed its gates, waiting for a reviewer.
    heartbeat = demo.task(
        "Heartbeat extends the lease",
        spec=demo.claim_spec,
        priority=3,
        labels=["backend"],
        allowed_paths=paths,
        depends_on=[claim_task],
    )
    services.task_publish(task=heartbeat, actor=maria)
    attempt = demo.claim(alan)
    demo.attach(attempt, alan, demo.good.junit, "junit", "junit.xml", ["AC-1"])
    demo.attach(attempt, alan, demo.diff, "diff", "change.diff")
    demo.attach(attempt, alan, artifacts.screenshot(), "screenshot", "queue.png", ["AC-2"])
    demo.attach(attempt, vera, demo.good.junit, "junit", "ci-junit.xml", ["AC-1"])
    demo.attach(attempt, vera, demo.good.coverage, "coverage", "ci-coverage.xml")
    demo.submit(
        attempt,
        "Heartbeats push lease_expires_at forward.",
        "0aa4f3b",
        usage=_usage("gpt-5", 121_000, 6_800, "0.41", 720),
    )
    demo.check(attempt)

    # FM-3: claimed under a live lease, with a checkpoint and a proposed decision.
    upload = demo.task(
        "Stream uploads to disk while hashing",
        spec=demo.upload_spec,
        priority=2,
        labels=["backend", "storage"],
        allowed_paths=paths,
    )
    services.task_publish(task=upload, actor=maria)
    attempt = demo.claim(ada, labels=["storage"])
    attempts.attempt_checkpoint_save(
        attempt=attempt,
        actor=ada,
        revision=0,
        data={"step": "upload handler written", "next": "size limit and 413"},
    )
    attempts.attempt_heartbeat(
        attempt=attempt,
        actor=ada,
        lease_seconds=3600,
        usage=_usage("sonnet-4.5", 96_000, 4_300, "0.52", 610),
    )
    decisions.decision_propose(
        project=demo.project,
        actor=ada,
        attempt=attempt,
        title="Hash uploads in the upload handler",
        context="Hashing after the upload reads a 1 GiB file twice.",
        decision="A Django upload handler feeds each chunk to hashlib.sha256 as it is written.",
        alternatives=[{"option": "Hash after saving", "reason": "doubles disk reads"}],
        specs=[demo.upload_spec],
    )

    # FM-4: failed for good: its only attempt touched a file outside its allowed paths.
    scope = demo.task(
        "Tune the claim limit",
        spec=demo.claim_spec,
        priority=1,
        labels=["backend"],
        allowed_paths=["tasks/**"],
        max_attempts=1,
    )
    services.task_publish(task=scope, actor=maria)
    attempt = demo.claim(alan)
    demo.attach(attempt, alan, demo.diff_outside, "diff", "change.diff")
    demo.attach(attempt, alan, demo.good.junit, "junit", "junit.xml", ["AC-1"])
    demo.attach(attempt, alan, demo.good.coverage, "coverage", "coverage.xml")
    demo.attach(attempt, alan, artifacts.screenshot(), "screenshot", "queue.png", ["AC-2"])
    demo.submit(
        attempt,
        "Raise the claim limit.",
        "77e2c90",
        usage=_usage("gpt-5", 58_000, 1_900, "0.19", 300),
    )
    demo.check(attempt)  # diff-scope: factory_site/settings.py is outside tasks/**

    # FM-5: blocked by its agent.
    storage_task = demo.task(
        "Move evidence to S3", labels=["storage", "ops"], allowed_paths=["factory_site/**"]
    )
    services.task_publish(task=storage_task, actor=maria)
    attempt = demo.claim(ada, labels=["ops"])
    attempts.attempt_release(
        attempt=attempt,
        actor=ada,
        blocked=True,
        reason="Needs S3 credentials and a bucket; nothing in the environment provides them.",
    )

    # FM-6 ready, FM-7 draft, FM-8 cancelled.
    board = demo.task("Task board by state", labels=["ui"], allowed_paths=["templates/**"])
    services.task_publish(task=board, actor=maria)
    demo.task(
        "Decision log full-text search",
        labels=["ui"],
        description="Needs FM-S2 v2.",
        depends_on=[board],  # the plan page draws the wait
    )
    legacy = demo.task("Export tasks as legacy XML", labels=["ops"])
    services.task_cancel(task=legacy, actor=maria, reason="Nobody reads the XML export any more.")
