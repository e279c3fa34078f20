"""One request id followed from the submit through the runner's job and the gate jobs it
sends on (the runner's sandbox needs bubblewrap: tests/runner/conftest.py)."""

import pytest

from demo.repository import VERIFY, build
from demo.runner_demo import CRITERIA
from projects import services as project_services
from tests.test_request_ids import FOLLOWED

POLICY = {"runner": {"required": True}, "tests-pass": {}}


@pytest.fixture
def repo(tmp_path):
    return build(tmp_path / "repo")


@pytest.mark.django_db
def test_follows_one_request_id_from_the_submit_through_its_runner_and_gate_jobs_log_lines(
    flow,
    repo,
    api,
    logged,
    django_capture_on_commit_callbacks,
):
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        repository_url=repo.url,
        verify=VERIFY,
        gate_policy=POLICY,
    )
    task, attempt = flow.claimed(spec=flow.spec(criteria=CRITERIA), allowed_paths=["**"])

    with django_capture_on_commit_callbacks(execute=True):
        response = api(flow.agent).post(
            f"/api/v1/attempts/{attempt.pk}/submit/",
            {"summary": "Did it.", "change": {"commit": repo.honest}},
            format="json",
            HTTP_X_REQUEST_ID="run-1",
        )

    runs = dict(attempt.gate_runs.values_list("gate", "pk"))
    assert (response.status_code, response["X-Request-ID"]) == (202, "run-1")
    assert logged.lines(*FOLLOWED) == [
        ("tasks.attempts", "run-1", f"attempt {attempt.pk} of {task.key} submitted; gates: runner, tests-pass"),
        ("runner.jobs", "run-1", f"runner job started: gate runner, run {runs['runner']}"),
        ("evidence.jobs", "run-1", f"gate job started: gate tests-pass, run {runs['tests-pass']}"),
        ("evidence.jobs", "run-1", f"gate job ended: gate tests-pass, run {runs['tests-pass']} is passed"),
        ("runner.jobs", "run-1", f"runner job ended: gate runner, run {runs['runner']} is passed"),
    ]  # fmt: skip
