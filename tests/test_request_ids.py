"""Request ids: echoed or made for each request, carried into the jobs it starts (and the
jobs they start), and written on every log line on the way."""

import re

import pytest
from celery import shared_task, signals

from factory_site.celery import HEADER
from factory_site.celery import app as celery_app
from projects import logs

NEW_ID = re.compile(r"[0-9a-f]{32}")
FOLLOWED = {"tasks.attempts", "evidence.jobs", "runner.jobs"}
seen: list = []


@shared_task(name="tests.test_request_ids.record_job")
def record_job(depth: int) -> None:
    seen.append(logs.request_id())
    if depth:
        record_job.delay(depth - 1)


@pytest.mark.django_db
def test_follows_one_request_id_from_the_submit_through_its_gate_jobs_log_lines(
    flow, api, logged, django_capture_on_commit_callbacks
):
    flow.gates({"diff-scope": {}, "tests-pass": {}})
    task, attempt = flow.claimed()
    body = {"summary": "Did it.", "change": {"commit": "abcdef1000000000000000000000000000000000"}}

    with django_capture_on_commit_callbacks(execute=True):
        response = api(flow.agent).post(
            f"/api/v1/attempts/{attempt.pk}/submit/",
            body,
            format="json",
            HTTP_X_REQUEST_ID="agent-7:submit.42",
        )

    assert (response.status_code, response["X-Request-ID"]) == (202, "agent-7:submit.42")
    runs = dict(attempt.gate_runs.values_list("gate", "pk"))
    states = dict(attempt.gate_runs.values_list("gate", "state"))
    assert logged.lines(*FOLLOWED) == [
        ("tasks.attempts", "agent-7:submit.42", f"attempt {attempt.pk} of {task.key} submitted; gates: diff-scope, tests-pass"),
        *[
            line
            for gate in ("diff-scope", "tests-pass")
            for line in (
                ("evidence.jobs", "agent-7:submit.42", f"gate job started: gate {gate}, run {runs[gate]}"),
                ("evidence.jobs", "agent-7:submit.42", f"gate job ended: gate {gate}, run {runs[gate]} is {states[gate]}"),
            )
        ],
    ]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("given", ["x" * 129, "two words", "a\nb", "", "é"])
def test_an_insane_request_id_is_replaced_by_a_new_one(client, given):
    response = client.get("/healthz", HTTP_X_REQUEST_ID=given)

    assert NEW_ID.fullmatch(response["X-Request-ID"])


@pytest.mark.django_db
def test_a_request_without_an_id_gets_a_new_one_each_time_and_a_sane_one_is_kept(client):
    first, second = client.get("/healthz"), client.get("/healthz")
    kept = client.get("/healthz", HTTP_X_REQUEST_ID="x" * 128)

    assert NEW_ID.fullmatch(first["X-Request-ID"]) and NEW_ID.fullmatch(second["X-Request-ID"])
    assert first["X-Request-ID"] != second["X-Request-ID"]
    assert kept["X-Request-ID"] == "x" * 128
    assert logs.request_id() is None  # nothing stays bound after the request


@pytest.mark.django_db
def test_the_line_django_writes_for_a_refused_request_after_it_returned_carries_its_id(
    client, logged
):
    client.get("/no-such-page/", HTTP_X_REQUEST_ID="lost-1")

    assert logged.lines("django.request") == [
        ("django.request", "lost-1", "Not Found: /no-such-page/")
    ]


def test_a_sent_job_carries_the_request_id_in_its_headers_and_runs_under_it(monkeypatch):
    sent = []

    def keep(headers=None, **kwargs):
        sent.append(dict(headers))

    monkeypatch.setattr(celery_app.conf, "task_always_eager", False)
    signals.before_task_publish.connect(keep)
    try:
        with logs.bound("req-9"), celery_app.connection_for_write() as connection:
            record_job.apply_async((0,), connection=connection)
    finally:
        signals.before_task_publish.disconnect(keep)
    seen.clear()
    record_job.apply((0,), headers={HEADER: sent[0][HEADER]})  # as a worker runs it

    assert sent[0][HEADER] == "req-9"
    assert seen == ["req-9"]
    assert logs.request_id() is None


def test_jobs_started_by_a_job_inherit_its_id_and_a_job_with_none_gets_its_own():
    seen.clear()
    record_job.apply((2,), headers={HEADER: "req-5"})
    inherited = list(seen)
    seen.clear()
    record_job.apply((1,))  # as beat starts one: no request, no header
    own = list(seen)

    assert inherited == ["req-5", "req-5", "req-5"]
    assert len(own) == 2 and own[0] == own[1] and NEW_ID.fullmatch(own[0])


def test_a_header_that_is_not_a_sane_id_is_not_believed():
    seen.clear()

    record_job.apply((0,), headers={HEADER: "forged\nline"})

    assert NEW_ID.fullmatch(seen[0])
