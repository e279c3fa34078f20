"""The runner's cost: ``runner.verify.verify`` against the same test command run directly.

    uv run python bench/verify.py [--rounds 10] [--suite-seconds 30] [--suite-rounds 2] [--quick]
    uv run python bench/verify.py --real [--real-rounds 2] [--real-recipe venv|wheelhouse]

One real git repository is built in a temporary directory: a ``main`` branch, then a
branch with a few unittest tests and a tiny stdlib JUnit writer (``run_tests.py``).
After one warm-up verification (which clones the mirror), ``--rounds`` rounds alternate
(runner, direct; then direct, runner; ...). The runner's figure is the wall time of the
whole ``verify()`` call: fetch into the mirror, checkout into a fresh workspace, the
diff, the sandboxed test, reading the JUnit report, removing the workspace. The direct
figure is the same command (same interpreter, ``/usr/bin/python3``) run by
``subprocess`` in a plain checkout of the same commit, cleaned (``git clean -fdx``)
before each round so that both start from a tree without bytecode or reports. Target:
median overhead (runner minus direct) at most 1.5 s.

Then a branch whose tests take about ``--suite-seconds`` (half computing a fixed amount
of work calibrated on this machine, half sleeping) is pushed to the same repository and
measured the same way in ``--suite-rounds`` rounds. Target: median runner / median direct
at most 1.1.

Every verification of the repository is counted by what the mirror did (``git clone
--mirror`` or ``git fetch``, observed on ``runner.mirror.git``, checked against
``Result.mirror``): exactly one clone, the rest fetches. ``--quick`` is a 3 s suite and
3 rounds of each. Needs bubblewrap (the runner's sandbox), no database. Prints JSON.

``--real`` measures the dependency cache instead (docs/runner.md, "Caching dependencies")
on a real project with its own test suite: more-itertools 11.2.1, its sdist as published on
PyPI (``tests/fixtures/real_project/``, checked against its sha256), committed to a fresh
repository with ``requirements/runner.txt`` pinning its test tools (pytest, coverage). The
first verification fills the cache from PyPI (``setup_network``: this mode needs the
network): with ``--real-recipe venv`` it builds the requirements' virtualenv in the cache,
which later setups find complete and the test step uses read-only; with ``wheelhouse`` it
keeps their wheels there, and every setup makes a virtualenv in the workspace and installs
them offline. The test step runs the project's 765 tests with pytest. The first
verification starts from an empty cache; then ``--real-rounds`` more verifications of the
same commit follow. Target: the median later setup at most a fifth of the first.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import common  # the project on sys.path, a SECRET_KEY

PYTHON = "/usr/bin/python3"
TEST = f"{PYTHON} run_tests.py"
JUNIT = "reports/junit.xml"
TARGET_OVERHEAD_SECONDS = 1.5
TARGET_RATIO = 1.1

REAL_SDIST = common.ROOT / "tests/fixtures/real_project/more_itertools-11.2.1.tar.gz"
REAL_SHA256 = "cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63"
REAL_TARGET_RATIO = 0.2
# The project's requirements/testing.txt names coverage, unpinned; pytest writes the JUnit.
REAL_REQUIREMENTS = """\
# The test tools, pinned: added by bench/verify.py --real (the cache's key).
coverage==7.18.0
iniconfig==2.3.1
packaging==26.4
pluggy==1.7.0
pygments==2.21.0
pytest==9.2.0
"""
# docs/runner.md, "Caching dependencies", the two pip recipes. "venv": the lock file's
# environment is built once in the cache and used read-only by the test step. "wheelhouse":
# a virtualenv in the workspace every time, installed offline from wheels the cache keeps.
REAL_RECIPES = {
    "venv": (
        [
            'test -e "$RUNNER_CACHE/venv/.complete" || { rm -rf "$RUNNER_CACHE/venv" '
            '&& python3 -m venv --without-pip "$RUNNER_CACHE/venv" '
            '&& python3 -m pip --python "$RUNNER_CACHE/venv/bin/python" install --quiet '
            '-r requirements/runner.txt && touch "$RUNNER_CACHE/venv/.complete"; }'
        ],
        '"$RUNNER_CACHE/venv/bin/python" -m pytest -q -p no:cacheprovider '
        "--junitxml=reports/junit.xml tests",
    ),
    "wheelhouse": (
        [
            "python3 -m venv --without-pip .venv",
            'test -e "$RUNNER_CACHE/wheels/.complete" || { python3 -m pip download --quiet '
            '--only-binary :all: --dest "$RUNNER_CACHE/wheels" -r requirements/runner.txt '
            '&& touch "$RUNNER_CACHE/wheels/.complete"; }',
            "python3 -m pip --python .venv/bin/python install --quiet --no-index "
            '--find-links "$RUNNER_CACHE/wheels" -r requirements/runner.txt',
        ],
        ".venv/bin/python -m pytest -q -p no:cacheprovider --junitxml=reports/junit.xml tests",
    ),
}

RUN_TESTS = '''\
"""Run tests/ with unittest and write a JUnit report to reports/junit.xml."""

import os
import sys
import time
import unittest
import xml.etree.ElementTree as ET


class Timed(unittest.TextTestResult):
    times = {}

    def startTest(self, test):
        self.started = time.perf_counter()
        super().startTest(test)

    def stopTest(self, test):
        self.times[test.id()] = time.perf_counter() - self.started
        super().stopTest(test)


suite = unittest.defaultTestLoader.discover("tests")
result = unittest.TextTestRunner(verbosity=2, resultclass=Timed).run(suite)
failed = {test.id(): text for test, text in result.failures + result.errors}
root = ET.Element(
    "testsuite",
    name="tests",
    tests=str(result.testsRun),
    failures=str(len(result.failures)),
    errors=str(len(result.errors)),
)
for test_id, seconds in Timed.times.items():
    classname, name = test_id.rsplit(".", 1)
    case = ET.SubElement(root, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
    if test_id in failed:
        ET.SubElement(case, "failure", message="failed").text = failed[test_id]
os.makedirs("reports", exist_ok=True)
ET.ElementTree(root).write(JUNIT, encoding="utf-8", xml_declaration=True)
sys.exit(0 if result.wasSuccessful() else 1)
'''.replace("JUNIT", repr(JUNIT))

SMALL_TESTS = """\
import unittest

from calc import add, mean


class AddTest(unittest.TestCase):
    def test_integers(self):
        self.assertEqual(add(2, 3), 5)

    def test_floats(self):
        self.assertAlmostEqual(add(0.1, 0.2), 0.3)


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            mean([])
"""

CALC = """\
def add(a, b):
    return a + b


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)
"""

# A fixed amount of work: what it costs in the sandbox and out of it is what is compared.
COMPUTE = """\
def compute(units):
    total = 0
    for _ in range(units):
        total += sum(i * i for i in range(2000))
    return total
"""

SUITE_TESTS = """\
import time
import unittest

COMPUTE

UNITS = {units}  # calibrated to take about {compute:.2f} s on the machine that built this
SLEEP = {sleep:.3f}


class SuiteTest(unittest.TestCase):
    pass


def make(n):
    def test(self):
        self.assertGreater(compute(UNITS), 0)
        time.sleep(SLEEP)

    return test


for n in range({tests}):
    setattr(SuiteTest, f"test_{{n:02d}}", make(n))
""".replace("COMPUTE", COMPUTE)


def git(*args: str, cwd: Path) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.com",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.com",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True)
    return done.stdout.decode().strip()


def commit_files(repo: Path, branch: str, files: dict[str, str], message: str) -> str:
    """Commit ``files`` on a new ``branch`` off main; returns the commit's hash."""
    git("checkout", "--quiet", "-b", branch, "main", cwd=repo)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git("add", "--all", cwd=repo)
    git("commit", "--quiet", "-m", message, cwd=repo)
    sha = git("rev-parse", "HEAD", cwd=repo)
    git("checkout", "--quiet", "main", cwd=repo)
    return sha


def build_repository(repo: Path) -> str:
    """The repository with main and the small branch; returns the small branch's commit."""
    repo.mkdir()
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    (repo / "README.md").write_text("A repository for bench/verify.py.\n")
    (repo / ".gitignore").write_text("reports/\n__pycache__/\n")
    git("add", "--all", cwd=repo)
    git("commit", "--quiet", "-m", "start", cwd=repo)
    return commit_files(
        repo,
        "small",
        {"run_tests.py": RUN_TESTS, "calc.py": CALC, "tests/test_calc.py": SMALL_TESTS},
        "a few tests and their JUnit writer",
    )


def seconds_per_unit() -> float:
    """What one unit of ``compute`` costs here under /usr/bin/python3 (the fastest of three)."""
    probe = COMPUTE + textwrap.dedent(
        """
        import time

        compute(20)
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            compute(100)
            best = min(best, time.perf_counter() - started)
        print(best / 100)
        """
    )
    done = subprocess.run([PYTHON, "-c", probe], capture_output=True, check=True, text=True)
    return float(done.stdout)


def suite_files(suite_seconds: float, tests: int = 10) -> tuple[dict[str, str], dict]:
    share = suite_seconds / tests
    per_unit = seconds_per_unit()
    units = max(1, round(share / 2 / per_unit))
    text = SUITE_TESTS.format(units=units, compute=units * per_unit, sleep=share / 2, tests=tests)
    return (
        {"run_tests.py": RUN_TESTS, "tests/test_suite.py": text},
        {"tests": tests, "compute_units_per_test": units, "sleep_seconds_per_test": share / 2},
    )


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median_s": round(statistics.median(ordered), 3),
        "p90_s": round(ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)], 3),
        "samples_s": [round(s, 3) for s in samples],
    }


class Bench:
    def __init__(self, work: Path):
        from projects.verify import clean_verify

        self.repo = work / "repo"
        self.direct = work / "direct"
        self.home = work / "home"
        self.home.mkdir()
        self.project = SimpleNamespace(
            pk=1,
            repository_url=f"file://{self.repo}",
            default_branch="main",
            verify=clean_verify({"test": TEST, "junit": JUNIT}),
        )
        self.mirror = {"verifications": 0, "clones": 0, "fetches": 0, "results": []}
        self.problems = []
        self.testcases = 0

    def observe_mirror(self):
        """Count what the mirror does: ``git clone --mirror`` or ``git fetch``."""
        from runner import mirror

        real = mirror.git

        def counted(*args, **kwargs):
            if args[0] == "clone" and "--mirror" in args:
                self.mirror["clones"] += 1
            elif args[0] == "fetch":
                self.mirror["fetches"] += 1
            return real(*args, **kwargs)

        mirror.git = counted
        return lambda: setattr(mirror, "git", real)

    def runner(self, sha: str) -> tuple[float, float]:
        """Wall time of one whole ``verify()`` and the sandboxed steps' share of it."""
        from runner.verify import verify

        started = time.perf_counter()
        result = verify(project=self.project, commit=sha)
        wall = time.perf_counter() - started
        self.mirror["verifications"] += 1
        self.mirror["results"].append(result.mirror)
        self.testcases = (result.junit or b"").count(b"<testcase ")
        if not result.passed or not result.junit:
            self.problems.append({"commit": sha, "problems": result.problems or ["no JUnit"]})
            sys.stderr.write(result.log.decode(errors="replace")[-2000:])
        return wall, result.seconds

    def checkout(self, sha: str) -> None:
        if not self.direct.exists():
            git(
                "clone", "--quiet", "--no-checkout", str(self.repo), str(self.direct), cwd=self.home
            )
        git("fetch", "--quiet", "origin", cwd=self.direct)
        git(
            "-c",
            "advice.detachedHead=false",
            "checkout",
            "--quiet",
            "--detach",
            sha,
            cwd=self.direct,
        )

    def plain(self) -> float:
        """Wall time of the test command in the plain checkout, output captured as the runner does."""
        git("clean", "-fdxq", cwd=self.direct)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "TMPDIR": str(self.home),
            "LANG": "C.UTF-8",
            "CI": "1",
        }
        started = time.perf_counter()
        done = subprocess.run(
            ["/bin/sh", "-c", TEST],
            cwd=self.direct,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
        wall = time.perf_counter() - started
        if done.returncode != 0 or not (self.direct / JUNIT).is_file():
            self.problems.append({"direct": True, "exit_code": done.returncode})
            sys.stderr.write(done.stdout.decode(errors="replace")[-2000:])
        return wall

    def rounds(self, sha: str, count: int) -> dict:
        """``count`` rounds alternating runner-first and direct-first."""
        self.checkout(sha)
        runner, sandboxed, direct = [], [], []
        for n in range(count):
            order = ("runner", "direct") if n % 2 == 0 else ("direct", "runner")
            for which in order:
                if which == "runner":
                    wall, inside = self.runner(sha)
                    runner.append(wall)
                    sandboxed.append(inside)
                else:
                    direct.append(self.plain())
        outside = [wall - inside for wall, inside in zip(runner, sandboxed, strict=True)]
        return {
            "rounds": count,
            "junit_testcases": self.testcases,
            "runner": summary(runner),
            "direct": summary(direct),
            "runner_sandboxed_steps": summary(sandboxed),
            "runner_git_and_reports": summary(outside),
        }


def build_real_repository(repo: Path) -> str:
    """The real project's sdist, unpacked and committed on main with its pinned test
    tools; returns the commit."""
    data = REAL_SDIST.read_bytes()
    if hashlib.sha256(data).hexdigest() != REAL_SHA256:
        raise SystemExit(f"{REAL_SDIST} is not the sdist SOURCE.md names (sha256 differs)")
    with tarfile.open(REAL_SDIST) as archive:
        archive.extractall(repo.parent / "sdist", filter="data")
    [unpacked] = (repo.parent / "sdist").iterdir()
    unpacked.rename(repo)
    (repo / "requirements" / "runner.txt").write_text(REAL_REQUIREMENTS)
    (repo / ".gitignore").write_text(".venv/\nreports/\n__pycache__/\n")
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    git("add", "--all", cwd=repo)
    git("commit", "--quiet", "-m", "more-itertools 11.2.1 from its sdist", cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo)


def real(work: Path, rounds: int, recipe: str) -> dict:
    """The first verification of the real project (an empty cache) and ``rounds`` more."""
    from projects.verify import clean_verify
    from runner.verify import verify

    repo = work / "real"
    sha = build_real_repository(repo)
    setup, test = REAL_RECIPES[recipe]
    project = SimpleNamespace(
        pk=1,
        repository_url=f"file://{repo}",
        default_branch="main",
        verify=clean_verify(
            {
                "setup": setup,
                "setup_network": True,
                "cache_keys": ["requirements/*.txt"],
                "test": test,
                "junit": "reports/junit.xml",
                "timeout_seconds": 900,
            }
        ),
    )
    runs, problems = [], []
    for _ in range(1 + rounds):
        started = time.perf_counter()
        result = verify(project=project, commit=sha)
        wall = time.perf_counter() - started
        seconds = {"setup": 0.0, "test": 0.0}
        for step in result.steps:
            seconds[step["name"]] += step.get("seconds", 0.0)
        runs.append(
            {
                "setup_s": round(seconds["setup"], 3),
                "test_s": round(seconds["test"], 3),
                "wall_s": round(wall, 3),
                "passed": result.passed,
                "junit_testcases": (result.junit or b"").count(b"<testcase "),
                "cache": next(
                    (
                        line.decode()
                        for line in result.log.splitlines()
                        if line.startswith(b"[runner] cache ")
                    ),
                    "",
                ),
            }
        )
        if not result.passed:
            problems.append({"round": len(runs), "problems": result.problems})
            sys.stderr.write(result.log.decode(errors="replace")[-3000:])
    first, later = runs[0], runs[1:]
    median_later = statistics.median(run["setup_s"] for run in later)
    ratio = round(median_later / first["setup_s"], 3)
    return {
        "project": "more-itertools 11.2.1 (sdist from PyPI, MIT)",
        "recipe": recipe,
        "first": first,
        "later": later,
        "first_setup_s": first["setup_s"],
        "later_setup_median_s": round(median_later, 3),
        "ratio": ratio,
        "target_ratio": REAL_TARGET_RATIO,
        "met": ratio <= REAL_TARGET_RATIO and not problems,
        "problems": problems,
    }


def site_on_a_work_folder(prefix: str) -> Path:
    """A new work folder, the runner's root in it, and Django set up on them."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    # The sandbox's user (FACTORY_RUNNER_UID when this runs as root) must pass through to
    # its workspace and the mirror under FACTORY_RUNNER_ROOT.
    work.chmod(0o711)
    os.environ["FACTORY_RUNNER_ROOT"] = str(work / "runner")
    # The bench's repository is a local one, under its own folder (docs/runner.md).
    os.environ["FACTORY_LOCAL_REPOSITORY_ROOTS"] = str(work)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
    import django

    django.setup()
    return work


def main_real(rounds: int, recipe: str) -> None:
    work = site_on_a_work_folder("factory-bench-verify-real-")
    from django.conf import settings

    try:
        measured = real(work, rounds, recipe)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "real": measured,
        "machine": {
            "cpus": os.cpu_count(),
            "sandbox": settings.FACTORY_RUNNER_SANDBOX,
            "as_root": os.geteuid() == 0,
        },
        "config": {"real": True, "real_rounds": rounds, "real_recipe": recipe},
        "meets_target": measured["met"],
    }
    print(json.dumps(result, indent=2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, help="small repository rounds (10; --quick 3)")
    parser.add_argument(
        "--suite-seconds", type=float, help="the long suite's length (30; --quick 3)"
    )
    parser.add_argument("--suite-rounds", type=int, help="long suite rounds (2; --quick 3)")
    parser.add_argument("--quick", action="store_true", help="a 3 s suite and 3 rounds of each")
    parser.add_argument(
        "--real", action="store_true", help="the dependency cache on a real project (network)"
    )
    parser.add_argument(
        "--real-rounds", type=int, default=2, help="verifications after the first (2)"
    )
    parser.add_argument(
        "--real-recipe",
        choices=sorted(REAL_RECIPES),
        default="venv",
        help="how setup uses the cache (docs/runner.md): venv (default) or wheelhouse",
    )
    args = parser.parse_args()
    if args.real:
        main_real(args.real_rounds, args.real_recipe)
        return
    defaults = (3, 3.0, 3) if args.quick else (10, 30.0, 2)
    args.rounds = args.rounds or defaults[0]
    args.suite_seconds = args.suite_seconds or defaults[1]
    args.suite_rounds = args.suite_rounds or defaults[2]

    work = site_on_a_work_folder("factory-bench-verify-")
    from django.conf import settings

    try:
        bench = Bench(work)
        restore = bench.observe_mirror()
        try:
            small_sha = build_repository(bench.repo)
            bench.runner(small_sha)  # warm-up: clones the mirror
            small = bench.rounds(small_sha, args.rounds)
            files, shape = suite_files(args.suite_seconds)
            # Pushed after the mirror exists: the next fetch must bring it in.
            suite_sha = commit_files(bench.repo, "suite", files, "a long suite")
            suite = bench.rounds(suite_sha, args.suite_rounds)
        finally:
            restore()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    overhead = round(small["runner"]["median_s"] - small["direct"]["median_s"], 3)
    small |= {
        "overhead_seconds": overhead,
        "target_overhead_seconds": TARGET_OVERHEAD_SECONDS,
        "met": overhead <= TARGET_OVERHEAD_SECONDS,
    }
    ratio = round(suite["runner"]["median_s"] / suite["direct"]["median_s"], 3)
    suite = {
        "suite_seconds": args.suite_seconds,
        **shape,
        **suite,
        "overhead_seconds": round(suite["runner"]["median_s"] - suite["direct"]["median_s"], 3),
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
    }
    seen = bench.mirror
    mirror = {
        "verifications": seen["verifications"],
        "clones": seen["clones"],
        "fetches": seen["fetches"],
        "result_mirror": {how: seen["results"].count(how) for how in ("cloned", "fetched")},
        "met": seen["clones"] == 1
        and seen["fetches"] == seen["verifications"] - 1
        and seen["results"].count("cloned") == 1,
    }
    result = {
        "small": small,
        "suite": suite,
        "mirror": mirror,
        "all_passed": not bench.problems,
        "problems": bench.problems,
        "machine": {
            "cpus": os.cpu_count(),
            "python": subprocess.run(
                [PYTHON, "--version"], capture_output=True, text=True, check=True
            ).stdout.strip(),
            "sandbox": settings.FACTORY_RUNNER_SANDBOX,
            "as_root": os.geteuid() == 0,
        },
        "config": vars(args),
    }
    result["meets_target"] = (
        small["met"] and suite["met"] and mirror["met"] and result["all_passed"]
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
