"""Real evidence for the demo: a pytest run with coverage, and diffs made by git.

Nothing here is hand-written to look like a tool's output: the JUnit XML, the
Cobertura XML and the log come from running the demo suite with pytest under
coverage.py, and the diffs from ``git diff`` of real changes.
"""

import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUITE = Path(__file__).parent / "suite"
SCREENSHOT = Path(__file__).parent / "screenshot.png"


@dataclass
class SuiteRun:
    junit: bytes
    coverage: bytes
    log: bytes


def run_suite(*, broken: bool) -> SuiteRun:
    """Run the demo suite with pytest under coverage.py; ``broken`` makes one test fail."""
    with tempfile.TemporaryDirectory(prefix="factory-demo-") as tmp:
        work = Path(tmp)
        for source in SUITE.glob("*.py"):
            shutil.copy(source, work / source.name)
        (work / "tests").mkdir()
        shutil.move(work / "test_claim_demo.py", work / "tests" / "test_claim_demo.py")
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env.update({"DEMO_BROKEN": "1" if broken else "0", "PYTHONPATH": str(work)})
        # The demo suite needs no plugin: whatever this environment installs (hypothesis,
        # playwright, …) would take seconds to import, and be listed in the demo's log.
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        data_file = str(work / ".coverage")
        pytest = [
            sys.executable,
            "-m",
            "coverage",
            "run",
            f"--data-file={data_file}",
            "--source",
            str(work),
            "--omit",
            "*/tests/*",
            "-m",
            "pytest",
            "-p",
            "no:django",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            "--rootdir",
            str(work),
            "--confcutdir",  # no conftest.py above the copy, wherever the temporary folder is
            str(work),
            "--color=yes",
            "-v",
            "--junitxml",
            str(work / "junit.xml"),
            "tests/test_claim_demo.py",
        ]
        run = subprocess.run(pytest, cwd=work, env=env, capture_output=True, timeout=120)
        if run.returncode not in (0, 1):
            raise RuntimeError(f"the demo pytest run failed to start:\n{run.stderr.decode()}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "coverage",
                "xml",
                f"--data-file={data_file}",
                "-o",
                str(work / "coverage.xml"),
            ],
            cwd=work,
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        return SuiteRun(
            junit=(work / "junit.xml").read_bytes(),
            coverage=(work / "coverage.xml").read_bytes(),
            log=run.stdout + run.stderr,
        )


def git_diff(before: dict[str, str], after: dict[str, str]) -> bytes:
    """The unified diff git prints for changing the files ``before`` into ``after``."""
    git = shutil.which("git")
    if git is None:
        return _difflib_diff(before, after)
    with tempfile.TemporaryDirectory(prefix="factory-diff-") as tmp:
        work = Path(tmp)

        def run(*args):
            return subprocess.run(
                [
                    git,
                    "-c",
                    "user.name=demo",
                    "-c",
                    "user.email=demo@example.invalid",
                    "-c",
                    "init.defaultBranch=main",
                    *args,
                ],
                cwd=work,
                check=True,
                capture_output=True,
                timeout=30,
            ).stdout

        run("init", "-q")
        _write(work, before)
        run("add", "-A")
        run("commit", "-q", "-m", "base")
        for path in set(before) - set(after):
            (work / path).unlink()
        _write(work, after)
        run("add", "-A")
        return run("diff", "--cached")


def _write(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _difflib_diff(before: dict[str, str], after: dict[str, str]) -> bytes:
    out = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path, ""), after.get(path, "")
        out.extend(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"a/{path}" if path in before else "/dev/null",
                f"b/{path}" if path in after else "/dev/null",
            )
        )
    return "".join(out).encode()


def screenshot() -> bytes:
    return SCREENSHOT.read_bytes()
