"""Webhook delivery under faults: a real receiver process (``proof.receiver``) and a real
Celery worker on Redis and PostgreSQL.

Each test breaks one part (the receiver, its answers, the worker, the broker) while
events are written, mends it, drives the sweep the beat job runs
(``events.services.deliveries_due``) and reads the receiver's log: every event the
subscription wanted arrived at least once, and a duplicate carries its event's
webhook-id. The workers share the test database, so these tests commit
(transaction=True). They use Redis database 13, emptied before and after, and queues
of their own: one for a worker the tests share, one for the workers a test starts.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import redis
from django.db import connection, transaction
from django.utils import timezone

from events import services
from events.models import Delivery
from projects.models import Event, Project
from tests.conftest import postgres_only
from tests.workers import Worker, database_url, jobs_to_redis, wait_for

pytestmark = [postgres_only, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("FACTORY_TEST_WEBHOOK_REDIS_URL", "redis://127.0.0.1:6379/13")
QUEUE = f"test-webhooks-{os.getpid()}"
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 0.5  # seconds a try waits for an answer, here and in the workers
SCHEDULE = "0.2,0.2,0.5,0.5,1,1,2,2,3,3"  # the retry delays, here and in the workers
TASKS = 5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Receiver:
    """A ``python -m proof.receiver`` process on one port and one log, killed and
    started again at will; the subscription is made before it starts (it needs the
    subscription's secret)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.log = folder / "received.jsonl"
        self.secret = ""
        self.process = None

    def start(self, secret: str = "") -> None:
        self.secret = secret or self.secret
        with open(self.folder / "receiver.out", "ab") as out:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "proof.receiver", "--port", str(self.port)),
                    *("--secret", self.secret, "--log", str(self.log)),
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._listening, 15, "the receiver to listen")

    def _listening(self) -> bool:
        assert self.process.poll() is None, (self.folder / "receiver.out").read_text()
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def control(self, **behaviour) -> None:
        """Change its answers: ``status``, ``delay`` (seconds), ``location``."""
        base = f"http://127.0.0.1:{self.port}"
        assert httpx.post(f"{base}/_control", json=behaviour).status_code == 204

    def stats(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.port}/_stats").json()

    def lines(self) -> list[dict]:
        """Each verified delivery it logged: ``{"id", "type", "event", "at"}``."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def receiver(tmp_path):
    r = Receiver(tmp_path)
    yield r
    r.kill()


@pytest.fixture(autouse=True)
def fast_webhooks(settings):
    """The short timeout and retry schedule the workers have, in this process too."""
    settings.FACTORY_WEBHOOK_TIMEOUT = TIMEOUT
    settings.FACTORY_WEBHOOK_RETRY_SCHEDULE = [float(s) for s in SCHEDULE.split(",")]


class WebhookWorker(Worker):
    """A worker process of the site on the test database, taking ``queue``, with the short
    timeout and retry schedule of this module; ready when made."""

    def __init__(self, queue, log_path, timeout=TIMEOUT):
        super().__init__(
            queue,
            log_path=log_path,
            broker_url=REDIS_URL,
            database_url=database_url(),
            media_root=log_path.parent / "media",
            name=f"{queue}-{log_path.stem}@%h",
            env={
                "FACTORY_WEBHOOK_TIMEOUT": str(timeout),
                "FACTORY_WEBHOOK_RETRY_SCHEDULE": SCHEDULE,
                "FACTORY_WEBHOOK_ALLOW_PRIVATE": "1",
                "CELERY_TRACE_LOG_LEVEL": "INFO",  # a line for each job that finished
            },
        )
        wait_for(self.ready, 60, "the worker to start")

    def finished(self) -> int:
        """How many jobs it has finished."""
        return self.log_path.read_bytes().count(b"] succeeded in ")


@pytest.fixture(scope="module")
def shared_worker(django_db_setup, tmp_path_factory):
    """One worker for the tests that neither kill it nor need it absent (a worker takes
    seconds to start), on a queue of its own."""
    worker = WebhookWorker(f"{QUEUE}-shared", tmp_path_factory.mktemp("shared") / "worker.log")
    yield worker
    worker.kill()


@pytest.fixture
def worker(shared_worker):
    """The shared worker, running, and this process's jobs sent to it."""
    assert shared_worker.process.poll() is None, shared_worker.log_path.read_text()
    with jobs_to_redis(REDIS_URL, f"{QUEUE}-shared"):
        yield shared_worker


@pytest.fixture
def start_worker(tmp_path):
    """``start_worker(timeout=TIMEOUT)``: a worker of the test's own, on a queue where this
    process's jobs go from the test's start (nobody takes them before)."""
    workers = []

    def start(timeout=TIMEOUT):
        worker = WebhookWorker(QUEUE, tmp_path / f"worker{len(workers)}.log", timeout)
        workers.append(worker)
        return worker

    with jobs_to_redis(REDIS_URL, QUEUE):
        yield start
        for worker in workers:
            worker.kill()


def subscribe(flow, receiver):
    """A subscription to the claims of ``flow``'s project, sent to ``receiver``."""
    return services.subscription_create(
        project=flow.project, actor=flow.manager, url=receiver.url, types=["task.claimed"]
    )


def claim_tasks(flow, count=TASKS):
    """Publish and claim ``count`` tasks: ``count`` wanted events, as many unwanted.

    In one transaction, so their tries start once it commits, when this process holds
    no lock in the project (a try taken meanwhile: see the last test)."""
    with transaction.atomic():
        for n in range(count):
            flow.claimed(title=f"Task {n}")


def failed_tries(subscription, count):
    """Wait until ``count`` deliveries have had a try that failed; their (code, error)."""
    pending = Delivery.objects.filter(
        subscription=subscription, status="pending", tries__gte=1, locked_until=None
    )
    wait_for(lambda: pending.count() == count, 30, f"{count} failed tries")
    return sorted(pending.values_list("last_code", "last_error"), key=str)


def sweep_until_delivered(subscription, seconds=30):
    """Do what the beat job does until no delivery is pending: each sweep queues the
    retries that are due (the receiver logs a delivery before it answers)."""
    pending = Delivery.objects.filter(subscription=subscription, status="pending")

    def done():
        if not pending.exists():
            return True
        services.deliveries_due()
        return False

    wait_for(done, seconds, "every delivery to arrive", every=0.5)


def assert_all_arrived(subscription, receiver, count=TASKS) -> Counter:
    """Every claim the audit trail holds arrived, under its own webhook-id (duplicates
    included); every delivery is delivered. The times each id arrived."""
    claims = Event.objects.filter(project=subscription.project, transition="claim")
    wanted = {f"msg_{pk}_{subscription.pk}": pk for pk in claims.values_list("pk", flat=True)}
    lines = receiver.lines()
    assert len(wanted) == count
    assert {(line["id"], line["event"], line["type"]) for line in lines} == {
        (webhook_id, event, "task.claimed") for webhook_id, event in wanted.items()
    }
    deliveries = Delivery.objects.filter(subscription=subscription)
    assert sorted(d.webhook_id for d in deliveries) == sorted(wanted)
    assert [d.status for d in deliveries] == ["delivered"] * count
    return Counter(line["id"] for line in lines)


def test_events_written_while_the_receiver_is_down_arrive_once_it_is_back(flow, receiver, worker):
    subscription = subscribe(flow, receiver)  # the receiver is not started yet
    claim_tasks(flow, 2)
    assert {e.split(":")[0] for _, e in failed_tries(subscription, 2)} == {"ConnectError"}
    receiver.start(subscription.secret)
    sweep_until_delivered(subscription)

    receiver.kill()
    claim_tasks(flow, 3)
    assert {e.split(":")[0] for _, e in failed_tries(subscription, 3)} == {"ConnectError"}
    receiver.start()
    sweep_until_delivered(subscription)

    assert_all_arrived(subscription, receiver)


def test_tries_a_slow_receiver_answers_too_late_are_sent_again_with_their_ids(
    flow, receiver, worker
):
    subscription = subscribe(flow, receiver)
    receiver.start(subscription.secret)
    receiver.control(delay=TIMEOUT + 0.5)

    claim_tasks(flow)
    assert failed_tries(subscription, TASKS) == [(None, f"no answer within {TIMEOUT} s")] * TASKS
    wait_for(lambda: receiver.stats()["received"] == TASKS, 10, "the late answers")  # logged
    receiver.control(delay=0)
    sweep_until_delivered(subscription)

    arrivals = assert_all_arrived(subscription, receiver)
    assert sorted(arrivals.values()) == [2] * TASKS  # the late one and the retry


def fails_then_recovers(flow, receiver, status, location=""):
    subscription = subscribe(flow, receiver)
    receiver.start(subscription.secret)
    receiver.control(status=status, location=location)

    claim_tasks(flow)
    tries = failed_tries(subscription, TASKS)
    receiver.control(status=204, location="")
    sweep_until_delivered(subscription)

    arrivals = assert_all_arrived(subscription, receiver)
    assert sorted(arrivals.values()) == [1] * TASKS  # a failed answer logs nothing
    return tries


def test_a_receiver_answering_500_gets_every_event_once_it_answers_204(flow, receiver, worker):
    tries = fails_then_recovers(flow, receiver, 500)

    assert tries == [(500, "")] * TASKS


def test_a_410_is_retried_like_any_failure_and_loses_no_event(flow, receiver, worker):
    tries = fails_then_recovers(flow, receiver, 410)

    assert tries == [(410, "")] * TASKS


def test_a_redirect_is_not_followed_and_the_event_waits_for_a_204(flow, receiver, worker):
    moved = f"http://127.0.0.1:{receiver.port}/moved"  # a GET there would answer 200

    tries = fails_then_recovers(flow, receiver, 302, location=moved)

    assert tries == [(302, f"redirected to {moved}; redirects are not followed")] * TASKS


def test_a_try_whose_worker_was_killed_is_sent_again_once_its_lease_runs_out(
    flow, receiver, start_worker
):
    subscription = subscribe(flow, receiver)
    receiver.start(subscription.secret)
    receiver.control(delay=3)
    first = start_worker(timeout=5)  # the receiver answers, late, within the timeout
    claim_tasks(flow)
    wait_for(lambda: receiver.stats()["requests"] == 1, 30, "the first try to be in flight")

    first.kill()  # SIGKILL mid-try: its delivery stays pending, leased for timeout + 30 s
    receiver.control(delay=0)
    (leased,) = Delivery.objects.filter(locked_until__gt=timezone.now())
    assert (leased.status, leased.tries) == ("pending", 1)
    start_worker()  # takes the tries still queued; the leased one is not due
    Delivery.objects.filter(pk=leased.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    sweep_until_delivered(subscription)

    assert_all_arrived(subscription, receiver)
    assert sorted(Delivery.objects.values_list("tries", flat=True)) == [1, 1, 1, 1, 2]


def test_deliveries_lost_with_a_flushed_redis_are_sent_again_by_the_sweep(
    flow, receiver, start_worker
):
    subscription = subscribe(flow, receiver)
    receiver.start(subscription.secret)
    claim_tasks(flow)  # no worker yet: the tries wait in Redis
    assert redis.Redis.from_url(REDIS_URL).llen(QUEUE) == TASKS

    redis.Redis.from_url(REDIS_URL).flushdb()
    start_worker()
    assert services.deliveries_due() == 0  # their first tries may still be queued
    # FACTORY_WEBHOOK_REQUEUE_AFTER later, the sweep takes them for lost:
    Delivery.objects.filter(subscription=subscription).update(next_try_at=timezone.now())
    assert services.deliveries_due() == TASKS
    sweep_until_delivered(subscription)

    arrivals = assert_all_arrived(subscription, receiver)
    assert sorted(arrivals.values()) == [1] * TASKS


@contextlib.contextmanager
def numbering_a_task(project):
    """Another connection numbers a new task of ``project`` and has not committed yet:
    the project's row stays locked, as during every task_create."""
    numbered, done = threading.Event(), threading.Event()

    def write():
        try:
            with transaction.atomic():
                Project.objects.get(pk=project.pk).next_key("task")
                numbered.set()
                done.wait(30)
        finally:
            connection.close()

    writer = threading.Thread(target=write)
    writer.start()
    assert numbered.wait(10)
    try:
        yield
    finally:
        done.set()
        writer.join(30)


def test_a_try_taken_while_the_project_is_being_written_is_made_not_skipped(
    flow, receiver, start_worker
):
    subscription = subscribe(flow, receiver)
    receiver.start(subscription.secret)
    claim_tasks(flow, 1)  # no worker yet: the try waits in Redis

    with numbering_a_task(flow.project):
        worker = start_worker()
        wait_for(lambda: worker.finished() == 1, 30, "the try's job to finish")
        delivery = Delivery.objects.get()

    assert (delivery.status, delivery.tries) == ("delivered", 1)
    assert [line["id"] for line in receiver.lines()] == [delivery.webhook_id]
