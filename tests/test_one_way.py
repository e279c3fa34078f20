"""Each rule written once, read from the source: who is the runner, how jobs start after a
commit, how a task and its attempt are locked, how any row is locked, where API addresses
are made.

Source scans, like tests/test_layers.py: they fail when a second way creeps back in.
"""

import ast
import re
from pathlib import Path

from tests.test_layers import LAYERS, ROOT

# A gate's name compared with "runner": ==, !=, in, not in, a lookup by that key.
RUNNER_NAMED = re.compile(
    r"""[=!]=\s*["']runner["']"""
    r"""|["']runner["']\s*[=!]="""
    r"""|["']runner["']\s+(not\s+)?in\b"""
    r"""|\[\s*["']runner["']\s*\]"""
    r"""|\.get\(\s*["']runner["']"""
    r"""|\bgate\s*=\s*["']runner["']"""
    r"""|\w:runner["']"""  # a rule keyed by model and gate name: "evidence.gaterun:runner"
)
# Allowed, each with why: (path, the line's text stripped) → reason.
RUNNER_ALLOWED = {
    ("tasks/review.py", 'runner = applied.get("runner")'): (
        "reads the review record's field named runner (the API's name for the runner's"
        " summary, stored on the attempt), not a gate's name"
    ),
}


def server_modules(*, outside: tuple[str, ...] = ()) -> list[Path]:
    """The server's Python modules (the layered apps), migrations left out."""
    found = []
    for app in LAYERS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "migrations" not in path.parts and not relative.startswith(outside):
                found.append(path)
    return found


def runner_literals(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """``(path, line, text)`` of each comparison of a gate name with "runner" outside runner/."""
    hits = []
    for app in LAYERS:
        if app == "runner":
            continue
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if RUNNER_NAMED.search(line.partition("#")[0]):
                    hits.append((path.relative_to(root).as_posix(), number, line.strip()))
    return hits


def test_no_module_outside_the_runner_compares_a_gate_name_with_runner():
    hits = runner_literals()

    unexplained = [hit for hit in hits if (hit[0], hit[2]) not in RUNNER_ALLOWED]

    assert unexplained == []
    assert len(hits) == len(RUNNER_ALLOWED)  # an allowance nothing needs any more is removed


def test_the_scan_finds_each_way_of_naming_the_runner():
    lines = [
        'if run.gate == "runner":',
        "if 'runner' != gate:",
        'if "runner" in policy:',
        'if "runner" not in policy:',
        'params = policy["runner"]',
        'run = runs.get("runner")',
        'GateRun.objects.filter(gate="runner")',
        '("evidence.gaterun:runner", "*finish", None, "runner.finished"),',
    ]

    assert [bool(RUNNER_NAMED.search(line)) for line in lines] == [True] * len(lines)
    assert RUNNER_NAMED.search('"runner": {"state": run.state}') is None


def test_jobs_start_after_commit_only_through_enqueue_on_commit():
    raw = [
        f"{path.relative_to(ROOT)}:{number}"
        # projects/metrics.py counts what committed; it starts no job.
        for path in server_modules(outside=("projects/queue.py", "projects/metrics.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "on_commit(" in line.partition("#")[0] and "enqueue_on_commit(" not in line
    ]

    assert raw == []


def calls_in_functions(path: Path, name: str) -> list[str]:
    """The functions of ``path`` that call ``name``."""
    tree = ast.parse(path.read_text())
    return [
        function.name
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name
    ]


def test_an_attempt_is_locked_beside_its_task_only_by_lock_task_and_attempt():
    callers = {
        path.relative_to(ROOT).as_posix(): calls_in_functions(path, "_lock_attempt")
        for path in server_modules()
    }

    assert {path: found for path, found in callers.items() if found} == {
        "tasks/services.py": ["lock_task_and_attempt"]
    }


def row_locks(source: str) -> list[tuple[int, str]]:
    """``(line, call)`` of each ``select_for_update`` in ``source`` that is not ``FOR NO KEY
    UPDATE`` of its own rows (``no_key=True, of=("self",)``, ADR 0002)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "select_for_update":
            given = {k.arg: ast.unparse(k.value) for k in node.keywords}
            if given.get("no_key") != "True" or given.get("of") not in ("('self',)", '("self",)'):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_every_row_lock_is_for_no_key_update_of_its_own_rows():
    # A plain FOR UPDATE blocks the inserts that merely refer to the row (their foreign-key
    # checks take FOR KEY SHARE): bench/gates.py's deadlock. Without of=self a join locks
    # the joined rows too.
    found = {
        f"{path.relative_to(ROOT)}:{line}": call
        for path in server_modules()
        for line, call in row_locks(path.read_text())
    }

    assert found == {}


def test_the_lock_scan_finds_a_plain_lock_and_one_that_locks_its_joins():
    source = (
        "a = Task.objects.select_for_update().get(pk=1)\n"
        "b = Task.objects.select_for_update(no_key=True).select_related('project').get(pk=1)\n"
        "c = Task.objects.select_for_update(of=('self',)).get(pk=1)\n"
        "d = Task.objects.select_for_update(no_key=True, skip_locked=True, of=('self',))\n"
    )

    assert [line for line, _ in row_locks(source)] == [1, 2, 3]


def test_no_model_builds_an_api_address():
    shaped = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in server_modules()
        if path.name == "models.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "/api/" in line
    ]

    assert shaped == []
