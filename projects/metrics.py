"""The site's Prometheus metrics: every ``factory_`` name is defined here, once.

Services say what happened with one call where it happens (``gate_run_finished``,
``lease_expired``, …); a call made inside a transaction counts only once it commits, so a
rolled-back change is never counted. What is in the database now (tasks by state, the
review and landing queues, unfinished gate runs) is read when /metrics is scraped, by the
selectors of the apps that own it, and shaped here (``GAUGES``, ``render``).
docs/operations.md says what each name means and how to scrape it.

With ``PROMETHEUS_MULTIPROC_DIR`` set before the process starts, prometheus_client keeps
each process's values in files there and ``render`` adds up every process's: gunicorn's
workers and Celery's together. Without it (``make run``, the tests) they are this
process's own.
"""

import functools
import os

from django.core.exceptions import ValidationError
from django.db import transaction
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from projects.errors import ServiceError

CONTENT_TYPE = CONTENT_TYPE_LATEST
# A `_created` series beside every counter and histogram would double the series for
# nothing a rate() needs (and multiprocess mode drops them anyway).
disable_created_metrics()
# Ours alone: /metrics shows factory_ names only (the default registry's process and
# garbage-collector figures would not add up across processes anyway).
INSTRUMENTS = CollectorRegistry()

SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
HOURS = (10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 3 * 86400)


def _counter(name: str, documentation: str, labels=()) -> Counter:
    return Counter(name, documentation, labels, registry=INSTRUMENTS)


def _histogram(name: str, documentation: str, labels=(), buckets=SECONDS) -> Histogram:
    return Histogram(name, documentation, labels, registry=INSTRUMENTS, buckets=buckets)


CLAIMS = _counter("factory_claims", "Claims that started an attempt, by project.", ["project"])
CLAIM_REFUSALS = _counter(
    "factory_claim_refusals",
    "Claims answered without a task, by reason: the refusal's code, or nothing_claimable.",
    ["reason"],
)
GATE_RUNS = _counter(
    "factory_gate_runs",
    "Gate runs finished, by gate and verdict (passed, failed, error).",
    ["gate", "verdict"],
)
GATE_RUN_SECONDS = _histogram(
    "factory_gate_run_seconds", "How long a finished gate run's last try ran.", ["gate"]
)
RUNNER_VERDICTS = _counter(
    "factory_runner_verdicts",
    "The runner's runs of a verify block in the sandbox (submissions and the lander's"
    " trees), by verdict (passed, failed).",
    ["verdict"],
)
RUNNER_SECONDS = _histogram(
    "factory_runner_seconds",
    "How long the runner's verify block ran in the sandbox.",
    ["verdict"],
)
LANDINGS = _counter(
    "factory_landings",
    "Changes that left the landing queue, by project and outcome (landed, conflict,"
    " failed, dequeued).",
    ["project", "outcome"],
)
LANDING_WAIT_SECONDS = _histogram(
    "factory_landing_wait_seconds",
    "From a change's approval (joining the queue) to its landing on the target.",
    ["project"],
    buckets=HOURS,
)
LANDING_BATCHES = _counter(
    "factory_landing_batches",
    "Landing batches that ended, by project and state (landed, returned, error, abandoned).",
    ["project", "state"],
)
LANDING_VERIFY_RUNS = _counter(
    "factory_landing_verify_runs",
    "Verify runs the lander made, reruns included, by project; over landed changes, the"
    " runs each landing cost.",
    ["project"],
)
LANDING_FLAKES = _counter(
    "factory_landing_flakes",
    "Tests that failed and then passed at one tree the lander verified, by project.",
    ["project"],
)
WEBHOOK_DELIVERIES = _counter(
    "factory_webhook_deliveries",
    "Webhook delivery tries, by outcome: delivered, retry (failed; tried again later),"
    " failed (failed with no tries left).",
    ["outcome"],
)
WEBHOOK_LAG_SECONDS = _histogram(
    "factory_webhook_lag_seconds",
    "From the event to the try that delivered it.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600, 86400),
)
LEASE_EXPIRIES = _counter(
    "factory_lease_expiries",
    "Attempts ended because their lease ran out without a heartbeat, by project.",
    ["project"],
)
HTTP_REQUESTS = _counter(
    "factory_http_requests",
    "Requests answered, by route (the URL pattern's name, never the path), method and status.",
    ["route", "method", "status"],
)
HTTP_SECONDS = _histogram(
    "factory_http_request_seconds",
    "How long the site took to answer, by route and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

# Read from the database at each scrape: name → (help, labels). The selectors that read
# them give ``{name: {label values: value}}`` to ``render``.
GAUGES = {
    "factory_tasks": ("Tasks now, by project and state.", ["project", "state"]),
    "factory_landing_queued": ("Approved changes queued to land, by project.", ["project"]),
    "factory_landing_oldest_queued_seconds": (
        "How long the change waiting longest in the landing queue has waited (0 when none),"
        " by project.",
        ["project"],
    ),
    "factory_landing_quarantined": (
        "Tests quarantined by a project (their failures neither block nor blame), by project.",
        ["project"],
    ),
    "factory_review_oldest_seconds": (
        "Age of the oldest submission waiting for review (0 when none), by project.",
        ["project"],
    ),
    "factory_gate_runs_unfinished": (
        "Gate runs queued or running now, by gate and state.",
        ["gate", "state"],
    ),
    "factory_gate_run_oldest_seconds": (
        "How long the oldest queued run has waited since it was queued, and the oldest"
        " running run since it started, by gate and state.",
        ["gate", "state"],
    ),
}

HTTP_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


def _after_commit(metric, value: float = 1, **labels) -> None:
    """Add ``value`` to a counter, or observe it on a histogram, once the current
    transaction commits: at once outside one, never for one rolled back."""
    child = metric.labels(**labels) if labels else metric
    add = getattr(child, "observe", None) or child.inc
    connection = transaction.get_connection()
    # Asking the connection whether it is in a transaction would open one: the runner
    # and other callers outside any transaction never touch the database for a count.
    if connection.in_atomic_block:
        connection.on_commit(lambda: add(value))
    else:
        add(value)


# --- What the services say ---------------------------------------------------------------


def claim_refused(reason: str) -> None:
    """Count a claim refused before the service ran (the caller's role, at the API's edge)."""
    CLAIM_REFUSALS.labels(reason=reason).inc()


def claims_counted(claim):
    """Wrap the claim service: count a claim that started an attempt by its project, and
    one that did not by its refusal's code (``nothing_claimable`` for an empty answer)."""

    @functools.wraps(claim)
    def counted(**kwargs):
        try:
            attempt = claim(**kwargs)
        except (ServiceError, ValidationError) as exc:
            claim_refused(getattr(exc, "code", None) or "invalid")
            raise
        if attempt is None:
            CLAIM_REFUSALS.labels(reason="nothing_claimable").inc()
        else:
            _after_commit(CLAIMS, project=attempt.task.project.slug)
        return attempt

    return counted


def gate_run_finished(*, gate: str, verdict: str, seconds: float) -> None:
    _after_commit(GATE_RUNS, gate=gate, verdict=verdict)
    _after_commit(GATE_RUN_SECONDS, seconds, gate=gate)


def runner_finished(*, passed: bool, seconds: float) -> None:
    verdict = "passed" if passed else "failed"
    _after_commit(RUNNER_VERDICTS, verdict=verdict)
    _after_commit(RUNNER_SECONDS, seconds, verdict=verdict)


def landing_left(*, project: str, outcome: str, waited: float | None = None) -> None:
    """A change left the landing queue; ``waited`` (seconds since its approval) when it landed."""
    _after_commit(LANDINGS, project=project, outcome=outcome)
    if waited is not None:
        _after_commit(LANDING_WAIT_SECONDS, waited, project=project)


def landing_batch_ended(*, project: str, state: str, runs: int) -> None:
    """A landing batch ended in ``state`` after ``runs`` verify runs."""
    _after_commit(LANDING_BATCHES, project=project, state=state)
    if runs:
        _after_commit(LANDING_VERIFY_RUNS, runs, project=project)


def landing_flaked(*, project: str) -> None:
    """A test failed and then passed at one tree the lander verified."""
    _after_commit(LANDING_FLAKES, project=project)


def webhook_tried(*, outcome: str, lag: float | None = None) -> None:
    """One delivery try; ``lag`` (seconds since the event) when it delivered."""
    _after_commit(WEBHOOK_DELIVERIES, outcome=outcome)
    if lag is not None:
        _after_commit(WEBHOOK_LAG_SECONDS, lag)


def lease_expired(*, project: str) -> None:
    _after_commit(LEASE_EXPIRIES, project=project)


def request_answered(*, route: str, method: str, status: int, seconds: float) -> None:
    # A method outside the known few is "other": a caller must not mint a series per request.
    method = method if method in HTTP_METHODS else "other"
    HTTP_REQUESTS.labels(route=route, method=method, status=str(status)).inc()
    HTTP_SECONDS.labels(route=route, method=method).observe(seconds)


# --- The scrape --------------------------------------------------------------------------


class _Figures:
    """The gauges read at this scrape, as a collector."""

    def __init__(self, figures: dict[str, dict[tuple, float]]):
        unknown = figures.keys() - GAUGES.keys()
        if unknown:
            raise ValueError(f"not a gauge of projects.metrics.GAUGES: {sorted(unknown)}")
        self.figures = figures

    def collect(self):
        for name, (documentation, labels) in GAUGES.items():
            family = GaugeMetricFamily(name, documentation, labels=labels)
            for values, value in sorted(self.figures.get(name, {}).items()):
                family.add_metric(list(values), value)
            yield family


def render(figures: dict[str, dict[tuple, float]]) -> bytes:
    """The Prometheus text of every process's instruments and of ``figures``
    (``{gauge name: {label values: value}}``, read from the database for this scrape)."""
    registry = CollectorRegistry()
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:  # the test prometheus_client itself makes
        MultiProcessCollector(registry)
    else:
        registry.register(INSTRUMENTS)
    registry.register(_Figures(figures))
    return generate_latest(registry)
