"""One agent (or the reviewer) of a proof run: a separate process that works through the HTTP API.

It records what the server acknowledged in a journal (one JSON line per fact, written
as soon as it is known, so a SIGKILL loses nothing acknowledged) and counts every
status it sees. Transient failures (503, dropped connections) are retried with the
server's Retry-After hint; a submit is retried with the same Idempotency-Key.
"""

import argparse
import hashlib
import json
import os
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx


class Journal:
    def __init__(self, path: Path):
        self.path = path
        self.handle = path.open("a", buffering=1)
        self.statuses = Counter()

    def write(self, **fact) -> None:
        self.handle.write(json.dumps(fact) + "\n")

    def status(self, status: int | str, method: str, path: str) -> None:
        self.statuses[str(status)] += 1
        if isinstance(status, int) and status >= 500 and status != 503:
            self.write(error=status, method=method, path=path)
        if sum(self.statuses.values()) % 25 == 0:
            self.flush_statuses()

    def flush_statuses(self) -> None:
        self.path.with_suffix(".status.json").write_text(json.dumps(self.statuses))


class Agent:
    def __init__(self, base: str, token: str, journal: Journal, lease: int):
        self.http = httpx.Client(
            base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        self.journal, self.lease = journal, lease
        self.renewed = 0.0

    def keep_lease(self, attempt: int, *, now: bool = False) -> bool:
        """Heartbeat once a third of the lease has passed, as a live agent must; False if lost.

        On a loaded machine one step can take longer than a short lease: an agent that
        renewed only once would lose its task to another agent over and over.
        """
        if not now and time.monotonic() - self.renewed < self.lease / 3:
            return True
        beat = self.call(
            "POST", f"/attempts/{attempt}/heartbeat/", json={"lease_seconds": self.lease}
        )
        self.renewed = time.monotonic()
        return beat is not None and beat.status_code == 200

    def call(
        self, method: str, path: str, *, tries: int = 30, headers=None, **kwargs
    ) -> httpx.Response | None:
        for attempt in range(tries):
            try:
                response = self.http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                self.journal.status(type(exc).__name__, method, path)
                time.sleep(min(0.2 * 2**attempt, 3))
                continue
            self.journal.status(response.status_code, method, path)
            if response.status_code == 409:  # a refusal worth explaining afterwards
                self.journal.write(
                    refused=409,
                    code=response.headers.get("content-type", "").startswith("application/json")
                    and response.json().get("code"),
                    method=method,
                    path=path,
                    after_retries=attempt,
                )
            if response.status_code in (503, 429):
                if response.status_code == 503 and "Retry-After" not in response.headers:
                    self.journal.write(error="503 without Retry-After", method=method, path=path)
                time.sleep(
                    min(float(response.headers.get("Retry-After", 1)), 3) * random.uniform(0.5, 1)
                )
                continue
            return response
        return None

    def work_one(self) -> str:
        claim = self.call("POST", "/tasks/claim/", json={"lease_seconds": self.lease})
        if claim is None or claim.status_code == 204:
            return "idle"
        if claim.status_code != 201:
            return "refused"
        self.renewed = time.monotonic()
        task, attempt = claim.json()["task"]["key"], claim.json()["attempt"]["id"]
        self.journal.write(claimed=attempt, task=task)
        self.call("GET", f"/tasks/{task}/context/", params={"max_chars": 20000})
        evidence = []
        for kind, name, content in artifacts(task):
            if not self.keep_lease(attempt):
                return "lost"
            files = {"file": (name, content, "application/octet-stream")}
            answer = self.call(
                "POST", f"/attempts/{attempt}/evidence/", data={"kind": kind}, files=files
            )
            if answer is None or answer.status_code != 201:
                return "lost"
            evidence.append(
                [answer.json()["id"], answer.json()["sha256"], hashlib.sha256(content).hexdigest()]
            )
        saved = self.call(
            "PUT",
            f"/attempts/{attempt}/checkpoint/",
            json={"data": {"task": task, "step": "evidence"}, "revision": 0},
        )
        if saved is None or saved.status_code != 200:
            return "lost"
        if not self.keep_lease(attempt, now=True):
            return "lost"
        key = str(uuid.uuid4())
        submit = self.call(
            "POST",
            f"/attempts/{attempt}/submit/",
            headers={"Idempotency-Key": key},
            json={
                "summary": f"{task} done by pid {os.getpid()}",
                "change": {"commit": hashlib.sha1(task.encode()).hexdigest()},
            },
        )
        if submit is not None and submit.status_code == 202:
            self.journal.write(submitted=attempt, task=task, key=key, evidence=evidence)
            return "submitted"
        return "lost"


def artifacts(task: str) -> list[tuple[str, str, bytes]]:
    """A JUnit report and a diff, different for every task (so their hashes are too)."""
    test = task.replace("-", "_").lower()
    junit = (
        f"<testsuite tests='2'><testcase classname='tests.test_{test}' name='test_claim'/>"
        f"<testcase classname='tests.test_{test}' name='test_release'/></testsuite>"
    ).encode()
    diff = (
        f"diff --git a/tasks/{test}.py b/tasks/{test}.py\n--- a/tasks/{test}.py\n+++ b/tasks/{test}.py\n"
        f"@@ -1 +1 @@\n-VALUE = 0\n+VALUE = {len(task)}  # {task}\n"
    ).encode()
    return [("junit", "junit.xml", junit), ("diff", "change.diff", diff)]


def judged(agent: Agent, key: str) -> list[dict]:
    """Each criterion of the task's spec that a reviewer judges, marked met (a task made
    from an issue has such criteria: its task list); none for a task without a spec."""
    context = agent.call("GET", f"/tasks/{key}/context/", params={"max_chars": 200000})
    if context is None or context.status_code != 200:
        return []
    found = []

    def walk(node):
        if isinstance(node, dict):
            for criterion in node.get("criteria") or []:
                proof = criterion.get("proof") if isinstance(criterion, dict) else None
                if proof == "review" or (
                    isinstance(proof, dict) and proof.get("check") == "review"
                ):
                    found.append({"key": criterion["key"], "verdict": "met"})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(context.json())
    return list({mark["key"]: mark for mark in found}.values())


def review(base: str, token: str, journal: Journal, stop: Path, share: tuple[int, int]) -> None:
    """Approve everything that reaches review (this process's share of the task numbers),
    until told to stop and nothing is left."""
    agent = Agent(base, token, journal, lease=0)
    index, of = share
    while True:
        page = agent.call("GET", "/tasks/", params={"state": "in_review", "page_size": 200})
        found = page.json()["results"] if page is not None and page.status_code == 200 else []
        keys = [task["key"] for task in found if int(task["key"].rsplit("-", 1)[1]) % of == index]
        for key in keys:
            verdict = {"verdict": "approve", "criteria": judged(agent, key)}
            answer = agent.call("POST", f"/tasks/{key}/review/", json=verdict)
            if answer is not None and answer.status_code == 200:
                journal.write(approved=key)
        if not keys:
            if stop.exists():
                return
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--journal", required=True, type=Path)
    parser.add_argument(
        "--stop", required=True, type=Path, help="a file whose existence means: finish up"
    )
    parser.add_argument("--lease", type=int, default=30)
    parser.add_argument("--role", choices=["agent", "reviewer"], default="agent")
    parser.add_argument(
        "--share", default="0/1", help="a reviewer's INDEX/COUNT of the task numbers"
    )
    args = parser.parse_args()
    journal = Journal(args.journal)
    try:
        if args.role == "reviewer":
            index, of = (int(part) for part in args.share.split("/"))
            review(args.base, args.token, journal, args.stop, (index, of))
            return
        agent = Agent(args.base, args.token, journal, args.lease)
        idle = 0
        while not (args.stop.exists() and idle):
            outcome = agent.work_one()
            idle = idle + 1 if outcome == "idle" else 0
            if outcome == "idle":
                time.sleep(min(0.1 * idle, 1.0))
    finally:
        journal.flush_statuses()


if __name__ == "__main__":
    main()
