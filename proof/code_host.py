"""The code-host proof: agents work labelled GitHub issues, and the site lands their work
through pull requests on a protected GitHub — the stand-in (tests/github_standin), on
loopback, every exchange checked against GitHub's published descriptions.

The stand-in's repository starts with a small standard-library suite; its ``main`` is
protected (no direct push, branches up to date, the required checks ``ci`` and
``factory-memory/review``). ``issues`` open issues carry the label ``factory``, each asking
for an independent feature in its text (``factory-proof kind=feature n=N``) with a task
list of two items. The site (gunicorn, Celery workers for the gates, the runner and the
lander, beat) follows the label: the host's sweep makes a task per issue. Coders
(``proof.coder``) claim them, push a branch to the stand-in and submit it; the runner
verifies it in bubblewrap, the site opens the task's pull request, a reviewer approves
every criterion, and the lander lands each change through its pull request
(``landing.mode: pull_request``): the verified commit on the branch, the team's CI waited
for, a merge pinned to that head; the landed commit closes the issue.

Meanwhile:

- the team's CI (a thread here) posts ``ci`` on every new head, and fails the merge of
  one task in ``ci_fails_every`` (the first attempt's, every commit the lander builds for
  it): that change goes back, and its agent makes it again;
- the host answers 502 to one call in ``host_fails_every`` (every call the site makes);
- people act on ready pull requests (``People``, ``people`` acts in all, in turn): ``ann``,
  a member (the manager's linked GitHub account), pushes a commit to one, which becomes an
  attempt in the manager's name that the reviewer approves and the lander lands;
  ``mallory``, no one here, pushes to another, which must never become an attempt or land
  (the approved change there goes back at landing, and an agent makes it again); ``ann``
  closes a third, withdrawing its attempt;
- webhooks reach ``/hooks/github/`` signed, duplicated (the same id again, and the same body
  under a new id) and out of order: an ``issues`` delivery per issue, a ``status`` delivery
  per check the CI posts.

At the end (``code_host_invariants``): every issue closed by exactly one landed commit (one
"Landed in" comment, naming a commit on ``main`` that is its task's) or still open with
its task not done and a reason; every push of ``ann``'s an attempt in the manager's name
at that commit, or said on its pull request; nothing of ``mallory``'s an attempt or on
``main``; every commit on ``main`` a pull request's merge whose head
had every required check green; every landed tree exactly the approved commit merged
onto the landed commit's parent (nothing a reviewer did not approve); no call to the
stand-in outside GitHub's description; and the generic invariants (``proof.invariants``).
"""

import hashlib
import hmac
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import psycopg

from demo.repository import RUN_TESTS
from proof.code_host_seed import HOOK_ENV, KEY_ENV
from proof.invariants import check_all
from proof.landing import Runners, _open_to_the_sandbox, _redis_del, team
from proof.stack import ROOT, Stack
from runner.sandbox import Bubblewrap

REPOSITORY = "octo-org/widgets"
LABEL = "factory"
APP_ID = 4242
SECRET = "proof webhook secret"
CI_LOOK_SECONDS = 0.05
# The landed commit's full id in the comment that closes an issue (codehosts.issues).
MARKER = re.compile(r"<!-- factory-memory:task (\S+) -->")
TRAILER = re.compile(r"^(Factory-Task|Factory-Attempt): (\S+)$", re.MULTILINE)
LANDED_IN = re.compile(r"\(([0-9a-f]{40})\) by Factory Memory task ")


@dataclass
class CodeHostRun:
    name: str
    agents: int
    issues: int
    timeout: float
    ci_fails_every: int = 10
    host_fails_every: int = 20
    runners: int = 1
    landers: int = 1
    people: int = 3  # pushes and closes by people on GitHub (``People``)
    faults: list = field(default_factory=list)

    def execute(self, *, keep: bool = False) -> dict:
        return execute(self, keep=keep)


def scenario(short: bool) -> CodeHostRun:
    if short:
        return CodeHostRun("code-host-short", agents=4, issues=12, timeout=480)
    return CodeHostRun("code-host", agents=16, issues=100, timeout=3600, people=12)


def issue_text(n: int) -> str:
    return (
        f"Add `feature_{n}`, returning {n}, with its test.\n\n"
        f"factory-proof kind=feature n={n}\n\n"
        f"- [ ] `feature_{n}()` returns {n}\n"
        f"- [ ] a test covers it\n"
    )


class Hooks:
    """GitHub's webhooks, as a host sends them on a bad day: each delivery signed, some
    sent twice (the same id: a redelivery; or the same body under a new id), all of them
    from a pool of threads that take them in a shuffled order."""

    def __init__(self, site: str, api: str, seed: int = 7):
        self.site, self.api = site, api
        self.random = random.Random(seed)
        self.pending: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.sent = Counter()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="hooks")

    def send(self, event: str, payload: dict) -> None:
        payload = {
            **payload,
            "repository": {"full_name": REPOSITORY, "url": f"{self.api}/repos/{REPOSITORY}"},
        }
        with self.lock:
            self.pending.append((event, payload))

    def _run(self) -> None:
        with httpx.Client(base_url=self.site, timeout=30) as client:
            while not self.stopped.is_set():
                with self.lock:
                    self.random.shuffle(self.pending)
                    taken, self.pending = self.pending[:8], self.pending[8:]
                for event, payload in taken:
                    self._deliver(client, event, payload)
                self.stopped.wait(0.2)

    def _deliver(self, client: httpx.Client, event: str, payload: dict) -> None:
        body = json.dumps(payload).encode()
        signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        delivery = f"{event}-{self.random.getrandbits(64):016x}"
        copies = [delivery]
        roll = self.random.random()
        if roll < 0.2:
            copies.append(delivery)  # a manual redelivery: the same id
        elif roll < 0.4:
            copies.append(f"{delivery}-again")  # the same body under a new id
        for copy in copies:
            try:
                answer = client.post(
                    "/hooks/github/",
                    content=body,
                    headers={
                        "Content-Type": "application/json",
                        "X-GitHub-Event": event,
                        "X-GitHub-Delivery": copy,
                        "X-Hub-Signature-256": signature,
                    },
                )
                self.sent[str(answer.status_code)] += 1
            except httpx.HTTPError:
                self.sent["unanswered"] += 1

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


class TeamCI(threading.Thread):
    """The team's CI: ``ci`` on every new head of the repository's branches, 0.2 s after it
    appears, success; but for one task in ``fails_every`` (those whose number it divides),
    a failure on every commit the lander built for the first attempt of it that it sees
    (the built commit's trailers name the task and the attempt): that merge fails, however
    many times a host's 502 makes the lander build it again, and the change comes back.
    Each post is delivered as GitHub's ``status`` webhook."""

    def __init__(self, world, repo, hooks: Hooks, fails_every: int):
        super().__init__(daemon=True, name="team-ci")
        self.world, self.repo, self.hooks, self.fails_every = world, repo, hooks, fails_every
        self.stopped = threading.Event()
        self.built = 0
        self.failed: list[str] = []
        self.failing: dict[str, str] = {}  # task → the attempt whose merge fails
        self.errors: list[str] = []

    def conclusion(self, sha: str) -> str:
        trailers = dict(TRAILER.findall(self.repo.git.git("log", "-1", "--format=%B", sha)))
        task, attempt = trailers.get("Factory-Task"), trailers.get("Factory-Attempt")
        if task is None:
            return "success"  # an agent's own commit: no merge candidate
        self.built += 1
        if int(task.rsplit("-", 1)[1]) % self.fails_every:
            return "success"
        if self.failing.setdefault(task, attempt) != attempt:
            return "success"
        self.failed.append(sha)
        return "failure"

    def run(self) -> None:
        seen, due = set(), []
        while not self.stopped.is_set():
            try:
                self._look(seen, due)
            except Exception as exc:  # a CI that stopped answering would stall the lander
                self.errors.append(repr(exc)[:300])
            self.stopped.wait(CI_LOOK_SECONDS)

    def _look(self, seen: set, due: list) -> None:
        now = time.monotonic()
        with self.world.lock:
            heads = self.repo.git.git("for-each-ref", "--format=%(objectname)", "refs/heads/")
        for sha in heads.split():
            if sha not in seen:
                seen.add(sha)
                due.append((now + 0.2, sha))
        for when, sha in [d for d in due if d[0] <= now]:
            due.remove((when, sha))
            state = self.conclusion(sha)
            with self.world.lock:
                self.repo.statuses.append((sha, "ci", state))
            self.hooks.send("status", {"sha": sha, "state": state, "context": "ci"})

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=30)


MEMBER, STRANGER = "ann", "mallory"  # ann is the manager's linked account; mallory no one's
NOTES = re.compile(r"^notes/(\w+)-\d+\.md$")


class People(threading.Thread):
    """The team on GitHub during the run. Every ``every`` seconds, once a task's pull request
    is ready for review (not a draft), one of them acts on it, in turn: ``ann`` (a member:
    the manager's linked account) pushes a commit to its branch, ``mallory`` (no one here)
    pushes one, ``ann`` closes it; each act followed by GitHub's ``pull_request`` delivery.
    ``acts`` in all, each on another pull request. A pushed commit adds
    ``notes/<login>-<pull>.md`` and keeps the suite green."""

    def __init__(self, world, repo, hooks: Hooks, acts: int, every: float = 4.0):
        super().__init__(daemon=True, name="people")
        self.world, self.repo, self.hooks, self.acts, self.every = world, repo, hooks, acts, every
        self.stopped = threading.Event()
        self.pushes: list[dict] = []  # {who, sha, pull, open: whether it was open then}
        self.closes: list[int] = []
        self.touched: set[int] = set()

    def run(self) -> None:
        turns = ["push:" + MEMBER, "push:" + STRANGER, "close:" + MEMBER]
        while not self.stopped.wait(self.every) and len(self.touched) < self.acts:
            with self.world.lock:
                ready = [
                    p
                    for p in self.repo.pulls.values()
                    if p.state == "open" and not p.draft and p.number not in self.touched
                    and MARKER.search(p.body or "")
                ]  # fmt: skip
                if not ready:
                    continue
                pull = min(ready, key=lambda p: p.number)
                kind, who = turns[len(self.touched) % len(turns)].split(":")
                self.touched.add(pull.number)
                if kind == "close":
                    self.world.close_pull(self.repo, pull.number, who)
                    self.closes.append(pull.number)
                else:
                    note = {f"notes/{who}-{pull.number}.md": f"{who} was here\n"}
                    try:
                        sha = self.repo.git.commit(pull.head, note, f"{who}'s note", by=who)
                    except RuntimeError:
                        continue  # the branch moved under the push: another pull request
                    self.pushes.append({"who": who, "sha": sha, "pull": pull.number})
            action = "closed" if kind == "close" else "synchronize"
            self.hooks.send(
                "pull_request", {"action": action, "pull_request": {"number": pull.number}}
            )

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=30)


def _closed(world, repo) -> int:
    with world.lock:
        return sum(1 for issue in repo.issues.values() if issue.state == "closed")


def execute(run: CodeHostRun, *, keep: bool = False) -> dict:
    Bubblewrap().check()
    from tests.github_standin import app_key
    from tests.github_standin.server import Fault, StandIn
    from tests.github_standin.world import Issue, Protection, World

    env = {
        "FACTORY_RECONCILE_SECONDS": "3",
        "FACTORY_GATE_REQUEUE_AFTER": "60",
        "FACTORY_GATE_TIME_LIMIT": "30",
        "FACTORY_GATE_GRACE_SECONDS": "5",
        "FACTORY_GATE_MAX_TRIES": "10",
        "FACTORY_RUNNER_TIME_LIMIT": "60",
        "FACTORY_LANDING_BACKOFF_SECONDS": "2",
        "FACTORY_LANDING_BACKOFF_MAX_SECONDS": "10",
        "FACTORY_LANDING_CHECKS_TIMEOUT": "120",
        "FACTORY_CODE_HOST_RECONCILE_MAX": "50",
        KEY_ENV: app_key()[0],
        HOOK_ENV: SECRET,
    }
    stack = Stack(run.name, web_workers=2, gate_workers=1, env=env)
    _open_to_the_sandbox(stack.work)
    world = World(stack.work / "github", APP_ID, [app_key()[1]], "factory-memory")
    standin = StandIn(world).start()
    repo = world.repository(REPOSITORY)
    repo.git.commit(
        "main",
        {
            "run_tests.py": RUN_TESTS,
            "tests/__init__.py": "",
            "tests/test_base.py": (
                "import unittest\n\n\nclass BaseTest(unittest.TestCase):\n"
                "    def test_base(self):\n        self.assertTrue(True)\n"
            ),
        },
        "base",
    )
    base = repo.git.head("main")
    repo.protect("main", Protection(required_checks=["ci", "factory-memory/review"], strict=True))
    installation = world.install("octo-org", [REPOSITORY])
    for login in (MEMBER, STRANGER):
        world.person(login)
    for n in range(1, run.issues + 1):
        repo.issues[n] = Issue(n, f"I_{n}", f"Feature {n}", issue_text(n), [LABEL], "ann")
    stack.env.update(
        FACTORY_RUNNER_ROOT=str(stack.work / "runner"),
        FACTORY_LOCAL_REPOSITORY_ROOTS=str(world.root),
        FACTORY_CODE_HOST_URLS=standin.url,
    )
    _redis_del("verify", "land")
    stack.create_database()
    url = f"file://{repo.git.path}"
    seeded = subprocess.run(
        [
            *(sys.executable, "-m", "proof.code_host_seed", "--agents", str(run.agents)),
            *("--repository", url, "--api", standin.url, "--full-name", REPOSITORY),
            *("--app", str(APP_ID), "--installation", str(installation.id)),
            *("--out", str(stack.work / "tokens.json"), "--person", MEMBER),
        ],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
    )
    if seeded.returncode:
        standin.stop()
        raise RuntimeError(seeded.stderr)
    tokens = json.loads((stack.work / "tokens.json").read_text())
    # From here on the host fails one call in host_fails_every, whoever makes it.
    standin.faults.append(Fault("502", every=run.host_fails_every))
    stack.start()
    runners = Runners(stack, run.runners, run.landers)
    hooks = Hooks(stack.base, standin.url)
    hooks.start()
    for n in random.Random(3).sample(range(1, run.issues + 1), run.issues):
        hooks.send("issues", {"action": "labeled", "issue": {"number": n}})
    ci = TeamCI(world, repo, hooks, run.ci_fails_every)
    ci.start()
    people = People(world, repo, hooks, run.people)
    people.start()
    began = time.monotonic()
    stop_file = stack.work / "stop"
    agents, reviewer = team(stack, tokens, url, stop_file)
    finished = False
    try:
        while time.monotonic() - began < run.timeout:
            if _closed(world, repo) == run.issues:
                finished = True
                break
            time.sleep(1)
        elapsed = time.monotonic() - began
    finally:
        stop_file.touch()
        for process in [*agents, reviewer]:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        people.stop()
        ci_alive = ci.is_alive()  # still answering at the end (it never dies on an error)
        ci.stop()
        hooks.stop()
        stack.manage("reconcile", check=False)
        runners.stop()
        stack.stop()
        standin.faults.clear()
    journals = sorted(stack.work.glob("*.jsonl"))
    statuses = Counter()
    for status_file in stack.work.glob("*.status.json"):
        statuses.update(json.loads(status_file.read_text()))
    invariants = check_all(stack.url, journals, stack.work / "media", expect_all_done=finished)
    figures, checks = code_host_invariants(stack.url, world, repo, base, standin)
    invariants.update(checks)
    figures["people"], checks = people_invariants(stack.url, world, repo, people)
    invariants.update(checks)
    violations = sum(check["violations"] for check in invariants.values()) + (0 if finished else 1)
    calls = standin.calls()
    result = {
        "scenario": run.name,
        "agents": run.agents,
        "issues": run.issues,
        "issues_closed": _closed(world, repo),
        "finished": finished,
        "seconds": round(elapsed, 1),
        "policy": "runner (required) on every submission; landing pull_request, squash, "
        f"through the stand-in (main protected, strict, ci and factory-memory/review "
        f"required); {run.runners} runner and {run.landers} lander workers",
        "host": {
            "calls": len(calls),
            "answered_502": sum(1 for call in calls if call.endswith(" 0")),
            "fails_one_call_in": run.host_fails_every,
        },
        "team_ci": {
            "built_commits_seen": ci.built,
            "failed": len(ci.failed),
            "merges_failed_for": sorted(ci.failing),
            "errors": ci.errors[:10],
            "alive_at_the_end": ci_alive,
        },
        "webhooks": dict(hooks.sent),
        "requests": sum(statuses.values()),
        "statuses": dict(sorted(statuses.items())),
        "code_host": figures,
        "invariants": invariants,
        "violations": violations,
        "ok": violations == 0,
        "work_dir": str(stack.work) if keep else None,
    }
    standin.stop()
    if not keep:
        stack.drop()
    _redis_del("verify", "land")
    return result


def code_host_invariants(url: str, world, repo, base: str, standin) -> tuple[dict, dict]:
    """What must hold at the end (the module's docstring); ``(figures, checks)``."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT t.key, t.origin, t.state, t.landed_commit, a.landing->>'commit',"
            " a.state, a.reviewed_by_id FROM tasks_task t"
            " LEFT JOIN tasks_attempt a ON a.id = t.current_attempt_id"
            " WHERE t.origin LIKE %s",
            (f"github:{REPOSITORY}#%",),
        ).fetchall()
        returned = conn.execute(
            "SELECT count(*) FROM tasks_attempt a JOIN tasks_task t ON t.id = a.task_id"
            " WHERE t.origin LIKE %s AND a.landing->>'reason' LIKE %s",
            (f"github:{REPOSITORY}#%", "%required check%"),
        ).fetchone()[0]
        reasons = dict(
            conn.execute(
                "SELECT t.origin, coalesce(a.landing->>'reason', a.end_reason, '')"
                " FROM tasks_task t JOIN tasks_attempt a ON a.task_id = t.id"
                " WHERE t.origin LIKE %s ORDER BY a.id",
                (f"github:{REPOSITORY}#%",),
            ).fetchall()
        )
    tasks = {int(origin.rsplit("#", 1)[1]): row for row in rows for origin in [row[1]]}
    with world.lock:
        issues = dict(repo.issues)
        comments = list(repo.comments)
        pulls = dict(repo.pulls)
    mainline = repo.git.git("rev-list", "--first-parent", f"{base}..main").split()
    on_main = set(mainline)

    closed_once = {"violations": 0, "closed": 0, "open": 0, "examples": []}
    for number, issue in sorted(issues.items()):
        task = tasks.get(number)
        landed = [c for c in comments if c.issue == number and c.body.startswith("Landed in ")]
        if issue.state == "closed":
            closed_once["closed"] += 1
            named = LANDED_IN.search(landed[0].body) if landed else None
            commit = named.group(1) if named else ""
            if len(landed) != 1 or commit not in on_main or task is None or task[3] != commit:
                closed_once["violations"] += 1
                closed_once["examples"].append(
                    {
                        "issue": number,
                        "landed_comments": len(landed),
                        "commit": commit,
                        "task": task and task[:4],
                    }
                )
        else:
            closed_once["open"] += 1
            if task is None or task[2] == "done" or not reasons.get(task[1]):
                closed_once["violations"] += 1
                closed_once["examples"].append({"issue": number, "open": True, "task": task})
    closed_once["examples"] = closed_once["examples"][:10]

    merged_at = {p.merge_commit_sha: p for p in pulls.values() if p.merged}
    green = {"violations": 0, "commits": len(mainline), "examples": []}
    for commit in mainline:
        pull = merged_at.get(commit)
        required = repo.protection["main"].required_checks
        states = {c: world.check_green(repo, pull.merged_head, c) for c in required} if pull else {}
        if pull is None or any(state != "success" for state in states.values()):
            green["violations"] += 1
            green["examples"].append({"commit": commit, "pull": pull and pull.number, **states})
    green["examples"] = green["examples"][:10]

    approved = {"violations": 0, "checked": 0, "examples": []}
    for key, _origin, state, landed, commit, attempt_state, reviewer in rows:
        if state != "done":
            continue
        approved["checked"] += 1
        parent = repo.git.git("rev-parse", f"{landed}^")
        merged = repo.git.merge_tree(parent, commit) if commit else None
        tree = repo.git.git("rev-parse", f"{landed}^{{tree}}")
        if merged != tree or attempt_state != "approved" or reviewer is None:
            approved["violations"] += 1
            approved["examples"].append(
                {"task": key, "landed": landed, "approved": commit, "attempt": attempt_state}
            )
    approved["examples"] = approved["examples"][:10]

    # Every task is done at the end of a finished run: no pull request of the site's is left
    # open (one an attempt from another branch superseded is closed, saying so).
    left_open = [
        {"pull": p.number, "head": p.head, "task": (MARKER.search(p.body or "") or [None, ""])[1]}
        for p in pulls.values()
        if p.state == "open"
    ]
    closed_up = {"violations": len(left_open), "examples": left_open[:10]}
    described = {
        "violations": len(standin.violations),
        "examples": list(standin.violations)[:10],
    }
    figures = {
        "tasks_from_issues": len(rows),
        "tasks_done": sum(1 for row in rows if row[2] == "done"),
        "pull_requests": len(pulls),
        "pull_requests_merged": len(merged_at),
        "commits_on_main": len(mainline),
    }
    checks = {
        "every_issue_closed_once_or_open_with_a_reason": closed_once,
        "every_commit_on_main_had_its_required_checks_green": green,
        "nothing_landed_that_a_reviewer_did_not_approve": approved,
        "every_call_in_githubs_description": described,
        "no_pull_request_left_open": closed_up,
    }
    figures["returned_for_a_failing_check"] = returned
    return figures, checks


def people_invariants(url: str, world, repo, people: People) -> tuple[dict, dict]:
    """What people's acts on GitHub must come to: every push by the member became an
    attempt in the manager's name at that commit, or the pull request was told once why
    not; nothing a stranger pushed is an attempt or on ``main``; ``(figures, checks)``."""
    pushed = {p["sha"]: p for p in people.pushes}
    with psycopg.connect(url) as conn:
        manager = conn.execute(
            "SELECT u.id FROM auth_user u JOIN codehosts_hostaccount h ON h.user_id = u.id"
            " WHERE h.login = %s",
            (MEMBER,),
        ).fetchone()
        attempts = dict(
            conn.execute(
                "SELECT a.change->>'commit', a.agent_id FROM tasks_attempt a"
                " WHERE a.change->>'commit' = ANY(%s)",
                (list(pushed),),
            ).fetchall()
        )
        withdrawn = conn.execute(
            "SELECT count(*) FROM tasks_event WHERE transition = 'withdraw' AND object_key"
            " NOT LIKE %s",
            ("%#%",),
        ).fetchone()[0]
    with world.lock:
        comments = [c.body for c in repo.comments]
    on_main = repo.git.git("ls-tree", "-r", "--name-only", "main", "notes/").split()
    landed = Counter(m.group(1) for name in on_main if (m := NOTES.match(name)))
    member = {"violations": 0, "pushes": 0, "attempts": 0, "told": 0, "examples": []}
    stranger = {"violations": 0, "pushes": 0, "examples": []}
    for sha, push in pushed.items():
        told = any(f"did not take the push of {sha[:12]}" in body for body in comments)
        if push["who"] == MEMBER:
            member["pushes"] += 1
            mine = manager is not None and attempts.get(sha) == manager[0]
            member["attempts"] += mine
            member["told"] += told and not mine
            if not (mine or told):
                member["violations"] += 1
                member["examples"].append(push)
        else:
            stranger["pushes"] += 1
            if sha in attempts:
                stranger["violations"] += 1
                stranger["examples"].append(push)
    stranger["violations"] += landed[STRANGER]
    figures = {
        "member_pushes": member["pushes"],
        "member_attempts": member["attempts"],
        "member_pushes_landed": landed[MEMBER],
        "stranger_pushes": stranger["pushes"],
        "closes": len(people.closes),
        "withdrawals": withdrawn,
    }
    checks = {
        "every_members_push_an_attempt_in_their_name_or_told_why_not": member,
        "nothing_a_stranger_pushed_is_an_attempt_or_landed": stranger,
    }
    return figures, checks
