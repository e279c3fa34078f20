"""An agent of the landing proof that writes code: claim, edit a real repository, push, submit.

python -m proof.coder --base URL --token T --journal J --stop FILE --clone DIR --origin URL

Each task's description is a JSON edit (``proof.landing.plan``). The agent fetches the
origin, starts from ``main`` as it is now, makes the edit there, pushes the commit to a
branch of its own and submits it; the runner verifies it and the reviewer approves it.
A task that came back from landing (a conflict, or tests that fail once merged) is
claimed again like any ready task, and its edit is made again on the new ``main``: for
a conflict that is the rebase, and for a semantic failure the edit reads the tree as it
is now (the caller uses the function's new name), which is the fix. What the context
said about the earlier attempt is journaled (``retry``), so the harness can tell a
sensible retry from a blind one.
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

from proof.agent import Agent, Journal

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Proof Agent",
    "GIT_AUTHOR_EMAIL": "agent@proof.invalid",
    "GIT_COMMITTER_NAME": "Proof Agent",
    "GIT_COMMITTER_EMAIL": "agent@proof.invalid",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


# --- the edits: each made on the tree as it is now ------------------------------------------


def semantic_name(tree: Path, pair: int) -> str:
    """The function of ``semantic_<pair>.py`` by the name it has now."""
    text = (tree / f"semantic_{pair}.py").read_text()
    return f"new_{pair}" if re.search(rf"^def new_{pair}\b", text, re.MULTILINE) else f"old_{pair}"


def edit(tree: Path, spec: dict) -> None:
    """Make the task's edit on the work tree ``tree``."""
    kind, n = spec["kind"], spec["n"]
    if kind == "shared":
        # A group's changes add their line at the same place: two made on one main clash.
        path = tree / "registry.py"
        lines = path.read_text().splitlines()
        entry = f'    "E{n}",'
        if entry not in lines:
            start = lines.index(f"SECTION_{spec['section']} = [")
            lines.insert(lines.index("]", start), entry)
        path.write_text("\n".join(lines) + "\n")
    elif kind == "rename":
        # A rename renames every use in the tree as it is now, as a refactoring tool would.
        pair = spec["pair"]
        for path in sorted(tree.rglob("*.py")):
            if ".git" in path.parts:
                continue
            text = path.read_text()
            renamed = re.sub(rf"\bold_{pair}\b", f"new_{pair}", text)
            if renamed != text:
                path.write_text(renamed)
    elif kind == "call" and spec.get("unreadable"):
        # Looked up when the test runs: once merged with the rename, it fails with a control
        # character in its message, which the suite's runner writes into its JUnit as it is.
        pair = spec["pair"]
        name = semantic_name(tree, pair)
        (tree / "tests" / f"test_semantic_{pair}_more.py").write_text(
            f"import unittest\n\nimport semantic_{pair}\n\n\n"
            f"class More{pair}Test(unittest.TestCase):\n"
            f"    def test_twice(self):\n"
            f"        found = getattr(semantic_{pair}, {name!r}, None)\n"
            f"        self.assertIsNotNone(found, 'no {name} in semantic_{pair} \\x01')\n"
            f"        self.assertEqual(found({2 * pair}), {3 * pair})\n"
        )
    elif kind == "call":
        pair = spec["pair"]
        name = semantic_name(tree, pair)
        (tree / "tests" / f"test_semantic_{pair}_more.py").write_text(
            f"import unittest\n\nfrom semantic_{pair} import {name}\n\n\n"
            f"class More{pair}Test(unittest.TestCase):\n"
            f"    def test_twice(self):\n"
            f"        self.assertEqual({name}({2 * pair}), {3 * pair})\n"
        )
    elif kind in ("feature", "person"):
        name = f"{kind}_{n}"
        (tree / f"{name}.py").write_text(f"def {name}():\n    return {n}\n")
        (tree / "tests" / f"test_{name}.py").write_text(
            f"import unittest\n\nfrom {name} import {name}\n\n\n"
            f"class Feature{n}Test(unittest.TestCase):\n"
            f"    def test_{name}(self):\n        self.assertEqual({name}(), {n})\n"
        )
    else:
        raise ValueError(f"no such edit: {kind}")


def returned_before(context: dict) -> list[dict]:
    """The landing records of earlier attempts that came back (conflict or failed)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            landing = node.get("landing")
            if isinstance(landing, dict) and landing.get("state") in ("conflict", "failed"):
                found.append(landing)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(context)
    return found


def failed_at_runner(context: dict) -> str:
    """The commit of the latest earlier attempt the runner failed at, if any. The plan's
    edits pass on a green main, so such a failure means main was red under it."""
    failed = [
        attempt
        for attempt in context.get("attempts", [])
        if any(
            gate.get("gate") == "runner" and gate.get("state") == "failed"
            for gate in attempt.get("gates", [])
        )
    ]
    latest = max(failed, key=lambda attempt: attempt.get("number", 0), default={})
    return (latest.get("change") or {}).get("commit", "")


ASKED = re.compile(r"factory-proof kind=(\w+) n=(\d+)")


def planned(described, context) -> dict | None:
    """The edit the task asks for: its description (a JSON spec, the landing proof's), or
    the line ``factory-proof kind=feature n=3`` in its brief (a task made from an issue,
    whose text the brief quotes: the code-host proof's)."""
    if described is None or described.status_code != 200:
        return None
    with contextlib.suppress(ValueError):
        return json.loads(described.json()["description"])
    found = ASKED.search(context.text) if context is not None else None
    return {"kind": found.group(1), "n": int(found.group(2))} if found else None


class Coder(Agent):
    def __init__(self, base: str, token: str, journal: Journal, lease: int, clone: Path, url: str):
        super().__init__(base, token, journal, lease)
        self.clone = clone
        if not (clone / ".git").exists():
            subprocess.run(
                ["git", "clone", "-q", url, str(clone)],
                env=GIT_ENV,
                check=True,
                capture_output=True,
            )

    def contains(self, commit: str, older: str) -> bool:
        if not older:
            return False
        try:
            git(self.clone, "merge-base", "--is-ancestor", older, commit)
        except subprocess.CalledProcessError:
            return False
        return True

    def main(self) -> str:
        return git(self.clone, "rev-parse", "origin/main")

    def waiting(self, done, seconds: float = 15) -> float:
        """Fetch every half second until ``done(main)`` holds or ``seconds`` pass; how long."""
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            with contextlib.suppress(subprocess.CalledProcessError):
                if done(self.main()):
                    break
            time.sleep(0.5)
            git(self.clone, "fetch", "-q", "--prune", "origin")
        return round(time.monotonic() - began, 2)

    def wait_for(self, commit: str) -> float:
        """A change comes back while its batch is still being landed: what it clashed with
        (``landing.base``) may reach main a moment later, or never (its batch fails). Wait
        a little for it, fetching, so the retry does not clash with the same thing again."""
        return self.waiting(lambda main: self.contains(main, commit)) if commit else 0.0

    def wait_for_main_to_move(self, failed: str) -> float:
        """An earlier attempt failed at the runner on a red main: as an agent would, wait a
        little for main to move off the commit it failed on before building on it again."""
        try:
            red = git(self.clone, "rev-parse", f"{failed}^")
        except subprocess.CalledProcessError:
            return 0.0
        return self.waiting(lambda main: main != red)

    def rebased(self, landing: dict, base: str, waited: float) -> dict:
        """What the retry of a returned change was made on. Sensible: on a newer main than
        the returned attempt was made on (the approved commit's parent)."""
        try:
            before = git(self.clone, "rev-parse", f"{landing.get('commit', '')}^")
        except subprocess.CalledProcessError:
            before = ""
        return {
            "after": landing.get("state"),
            "reason": (landing.get("reason") or "")[:300],
            "failing": landing.get("failing", []),
            "paths": landing.get("paths", []),
            "waited": waited,
            "clashed_with_on_main": self.contains(base, landing.get("base", "")),
            "sensible": before != base and self.contains(base, before),
        }

    def work_one(self) -> str:
        claim = self.call("POST", "/tasks/claim/", json={"lease_seconds": self.lease})
        if claim is None or claim.status_code == 204:
            return "idle"
        if claim.status_code != 201:
            return "refused"
        self.renewed = time.monotonic()
        body = claim.json()
        task, attempt = body["task"]["key"], body["attempt"]["id"]
        number = body["attempt"].get("number")
        self.journal.write(claimed=attempt, task=task, number=number)
        described = self.call("GET", f"/tasks/{task}/")
        context = self.call("GET", f"/tasks/{task}/context/", params={"max_chars": 200000})
        returned, failed = [], ""
        if context is not None and context.status_code == 200:
            returned = returned_before(context.json())
            failed = failed_at_runner(context.json())
        spec = planned(described, context)
        if spec is None:
            return "lost"
        try:
            # Start from main as it is now: after a conflict this is the rebase.
            git(self.clone, "fetch", "-q", "--prune", "origin")
            waited = self.wait_for(returned[0].get("base", "")) if returned else 0.0
            if failed:
                self.journal.write(red_main=task, waited=self.wait_for_main_to_move(failed))
            git(self.clone, "checkout", "-q", "-f", "-B", "work", "origin/main")
            git(self.clone, "clean", "-q", "-fdx")
            base = git(self.clone, "rev-parse", "HEAD")
            edit(self.clone, spec)
            git(self.clone, "add", "-A")
            git(self.clone, "commit", "-q", "-m", f"{task}: {spec['kind']} (attempt {number})")
            commit = git(self.clone, "rev-parse", "HEAD")
            if returned:
                self.journal.write(retry=task, **self.rebased(returned[0], base, waited))
            branch = f"agent/{task}-{number}"
            git(self.clone, "push", "-q", "-f", "origin", f"HEAD:refs/heads/{branch}")
        except subprocess.CalledProcessError as exc:
            self.journal.write(git_failed=task, stderr=(exc.stderr or "")[-500:])
            self.call("POST", f"/attempts/{attempt}/release/", json={"reason": "git failed"})
            return "lost"
        if not self.keep_lease(attempt, now=True):
            return "lost"
        key = str(uuid.uuid4())
        submit = self.call(
            "POST",
            f"/attempts/{attempt}/submit/",
            headers={"Idempotency-Key": key},
            json={
                "summary": f"{task}: {spec['kind']} on main at {base[:12]}",
                "change": {"commit": commit, "branch": branch},
            },
        )
        if submit is not None and submit.status_code == 202:
            self.journal.write(
                submitted=attempt, task=task, key=key, evidence=[], commit=commit, base=base
            )
            return "submitted"
        return "lost"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--journal", required=True, type=Path)
    parser.add_argument("--stop", required=True, type=Path)
    parser.add_argument("--clone", required=True, type=Path)
    parser.add_argument("--origin", required=True)
    parser.add_argument("--lease", type=int, default=120)
    args = parser.parse_args()
    journal = Journal(args.journal)
    try:
        coder = Coder(args.base, args.token, journal, args.lease, args.clone, args.origin)
        idle = 0
        while not (args.stop.exists() and idle):
            outcome = coder.work_one()
            idle = idle + 1 if outcome == "idle" else 0
            if outcome == "idle":
                time.sleep(min(0.2 * idle, 1.0))
    finally:
        journal.flush_statuses()


if __name__ == "__main__":
    main()
