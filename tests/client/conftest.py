"""The project's repository for `factory work`'s end-to-end tests: a bare repository whose
main has the demo's failing test, a clone the agent works in, and the project set to it."""

import subprocess

import pytest

from projects import services as project_services
from tasks.demo.repository import VERIFY, build


def sh(cwd, *args):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def origin(tmp_path):
    """A bare repository whose main holds the demo's false claim (one test fails)."""
    demo = build(tmp_path / "demo")
    sh(tmp_path, "git", "init", "-q", "--bare", "origin.git")
    sh(demo.path, "git", "push", "-q", str(tmp_path / "origin.git"), "false-claim:main")
    return tmp_path / "origin.git"


@pytest.fixture
def clone(tmp_path, origin):
    sh(tmp_path, "git", "clone", "-q", str(origin), "clone")
    return tmp_path / "clone"


@pytest.fixture
def project(flow, origin):
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        repository_url=f"file://{origin}",
        verify=VERIFY,
        gate_policy={"runner": {"required": True}, "tests-pass": {}, "diff-scope": {}},
    )
    return flow


@pytest.fixture
def upstream(tmp_path, origin):
    """A second clone that pushes to the project's repository after the agent cloned it."""
    sh(tmp_path, "git", "clone", "-q", "-b", "main", str(origin), "upstream")
    return tmp_path / "upstream"
