"""The landing proof's carried approval: whitespace is meaning, so only the same bytes carry.

Run once the proof's agents have stopped, against the same site, workers and repository,
through the HTTP API and git as agents, a reviewer and a person would:

1. an agent's change adding ``guard.py`` is verified, approved, and comes back from
   landing with a conflict (a person added another ``guard.py`` to main meanwhile);
2. the person takes theirs out again; another agent submits the same change with one
   line's indentation changed (``return True`` out of its ``if``: everyone may delete).
   It must go to review, not back to the queue in the first reviewer's name;
3. the reviewer rejects it; the first agent submits the approved bytes again, rebased.
   That one carries the approval, goes back to the queue without a review, and lands.

Main must never hold the whitespace change. Each way this fails is a violation.
"""

import json
import subprocess
import time
from pathlib import Path

import httpx

from proof.coder import git

PERM = (
    "def may_delete(roles):\n"
    '    if "admin" in roles:\n'
    '        print("an admin deletes")\n'
    "        return True\n"
    "    return False\n"
)
# The same lines but one's indentation: ``return True`` leaves the ``if``.
EVERYONE = PERM.replace("        return True\n", "    return True\n")
PERM_TEST = (
    "import unittest\n\nfrom guard import may_delete\n\n\n"
    "class GuardTest(unittest.TestCase):\n"
    "    def test_admins_may_delete(self):\n        self.assertTrue(may_delete(['admin']))\n"
)
THEIRS = "def may_delete(roles):\n    return False\n"
WAIT = 180


class Api:
    def __init__(self, base: str, token: str):
        self.http = httpx.Client(
            base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def __call__(self, method: str, path: str, **kwargs) -> dict:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else {}


def _wait(api: Api, key: str, states: tuple[str, ...]) -> dict:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        task = api("GET", f"/tasks/{key}/")
        if task["state"] in states:
            return task
        time.sleep(0.5)
    raise RuntimeError(f"{key} did not reach {' or '.join(states)} in {WAIT} s")


def _commit(clone: Path, files: dict, message: str, branch: str) -> str:
    """Commit ``files`` on main as the origin has it now, push it to ``branch``."""
    git(clone, "fetch", "-q", "--prune", "origin")
    git(clone, "checkout", "-q", "-f", "-B", "work", "origin/main")
    for name, text in files.items():
        path = clone / name
        if text is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", message)
    git(clone, "push", "-q", "-f", "origin", f"HEAD:refs/heads/{branch}")
    return git(clone, "rev-parse", "HEAD")


def _person_pushes(clone: Path, files: dict, message: str) -> None:
    for _ in range(10):
        _commit(clone, files, message, "person-work")
        try:
            git(clone, "push", "-q", "origin", "HEAD:main")
            return
        except subprocess.CalledProcessError:
            continue  # the lander moved main meanwhile: again on its tip
    raise RuntimeError("the person could not push to main")


def _submit(agent: Api, key: str, clone: Path, files: dict, label: str) -> int:
    claim = agent("POST", "/tasks/claim/", json={"project": "PL", "lease_seconds": 300})
    if claim.get("task", {}).get("key") != key:
        raise RuntimeError(f"the claim took {claim.get('task', {}).get('key')}, not {key}")
    attempt = claim["attempt"]["id"]
    commit = _commit(clone, files, f"{key}: {label}", f"agent/{key}-{label}")
    agent(
        "POST",
        f"/attempts/{attempt}/submit/",
        json={"summary": label, "change": {"commit": commit}},
        headers={"Idempotency-Key": f"{key}-{label}"},
    )
    return attempt


def run(base: str, tokens: dict, origin_url: str, work: Path) -> dict:
    """The three steps above; the figures and each check's violations."""
    manager, reviewer = Api(base, tokens["manager"]), Api(base, tokens["reviewer"])
    first, second = Api(base, tokens["agents"][0]), Api(base, tokens["agents"][1])
    clone, person = work / "carry-agent", work / "carry-person"
    for folder in (clone, person):
        git(work, "clone", "-q", origin_url, str(folder))
    paths = ["guard.py", "tests/test_guard.py"]
    task = manager(
        "POST",
        "/tasks/",
        json={
            "project": "PL",
            "title": "Guard deletes",
            "description": "{}",
            "allowed_paths": paths,
        },
    )
    key = task["key"]
    manager("POST", f"/tasks/{key}/publish/")
    guard = {"guard.py": PERM, "tests/test_guard.py": PERM_TEST}

    # 1. Approved, then back from landing with a conflict.
    claim_base = git(clone, "rev-parse", "origin/main")
    approved = _submit(first, key, clone, guard, "approved")
    _person_pushes(person, {"guard.py": THEIRS}, "a person's guard")
    _wait(reviewer, key, ("in_review",))
    reviewer("POST", f"/tasks/{key}/review/", json={"verdict": "approve"})
    _wait(reviewer, key, ("ready",))
    came_back = reviewer("GET", f"/attempts/{approved}/")["landing"]["state"]

    # 2. The same change with one line's indentation changed, by another agent.
    _person_pushes(person, {"guard.py": None}, "the person takes their guard out")
    whitespace = _submit(second, key, clone, {**guard, "guard.py": EVERYONE}, "whitespace")
    after_whitespace = _wait(reviewer, key, ("in_review", "approved", "done"))
    events = reviewer("GET", f"/tasks/{key}/events/")
    events = events.get("results", events) if isinstance(events, dict) else events
    said = [e.get("reason", "") for e in events if e.get("transition") == "gates_passed"]
    if after_whitespace["state"] == "in_review":
        reviewer(
            "POST",
            f"/tasks/{key}/review/",
            json={"verdict": "reject", "reason": "return True left its if: everyone may delete"},
        )
        _wait(reviewer, key, ("ready",))

    # 3. The approved bytes again, rebased: carried once, and landed.
    again = _submit(first, key, clone, guard, "again")
    landed = _wait(reviewer, key, ("done", "in_review", "ready"))
    carried = reviewer("GET", f"/attempts/{again}/")

    git(person, "fetch", "-q", "origin")
    versions = git(person, "log", "--format=%H", f"{claim_base}..origin/main", "--", "guard.py")
    on_main = [
        git(person, "show", f"{commit}:guard.py") + "\n"
        for commit in versions.split()
        if git(person, "ls-tree", "--name-only", commit, "guard.py")
    ]
    checks = {
        "the approved change came back from landing": came_back == "conflict",
        "the whitespace change went to review": after_whitespace["state"] == "in_review"
        and any("reviewed again: the change differs from attempt" in s for s in said),
        "the approved bytes again carried the approval once and landed": landed["state"] == "done"
        and (carried.get("landing") or {}).get("rebase_of") == 1,
        "main never held the whitespace change": EVERYONE not in on_main,
    }
    return {
        "task": key,
        "attempts": {"approved": approved, "whitespace": whitespace, "again": again},
        "whitespace_state": after_whitespace["state"],
        "again_state": landed["state"],
        "checks": checks,
        "violations": sum(not ok for ok in checks.values()),
    }


if __name__ == "__main__":  # python -m proof.carry BASE TOKENS.json ORIGIN_URL WORK_DIR
    import sys

    base, tokens, url, work = sys.argv[1:5]
    print(json.dumps(run(base, json.loads(Path(tokens).read_text()), url, Path(work)), indent=1))
