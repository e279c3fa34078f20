"""Claiming over real HTTP: many agents at once, and an agent that dies holding a task."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from factory_client import FactoryClient, FactoryError
from knox.models import AuthToken

from tasks.models import Attempt, Task
from tests.conftest import postgres_only
from tests.factories import expire_lease, member


def client(live_server, user):
    return FactoryClient(live_server.url, AuthToken.objects.create(user=user)[1], retries=0)


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_sixteen_agents_claiming_500_tasks_over_http_claim_each_exactly_once(live_server, flow):
    for i in range(500):
        flow.ready(title=f"task {i}")
    agents = [
        client(live_server, member(flow.project, "agent", f"http-agent-{i}")) for i in range(16)
    ]

    def drain(agent):
        claimed = []
        while (result := agent.claim(lease_seconds=600)) is not None:
            claimed.append(result["task"]["key"])
        return claimed

    with ThreadPoolExecutor(max_workers=16) as pool:
        per_agent = list(pool.map(drain, agents))

    keys = [key for claimed in per_agent for key in claimed]
    assert len(keys) == len(set(keys)) == 500
    assert Attempt.objects.count() == Attempt.objects.filter(state="running").count() == 500
    assert Task.objects.filter(state="claimed").count() == 500
    assert sum(1 for claimed in per_agent if claimed) > 1  # the work really was shared


@pytest.mark.django_db(transaction=True)
def test_a_killed_agents_task_is_resumed_by_another_from_its_checkpoint(live_server, flow):
    task = flow.ready(title="resume me")
    dead, alive = client(live_server, flow.agent), client(live_server, flow.agent2)
    first = dead.claim(lease_seconds=600)["attempt"]["id"]
    dead.save_checkpoint(first, {"done": ["tests"], "next": "implementation"}, revision=0)

    expire_lease(Attempt.objects.get(pk=first))  # the agent was killed: no more heartbeats
    second = alive.claim()
    with pytest.raises(FactoryError) as refused:
        dead.submit(first, "late work")
    bundle = alive.context(task.key)

    assert second["task"]["key"] == task.key and second["attempt"]["number"] == 2
    assert (refused.value.status, refused.value.code) == (409, "lease_lost")
    assert bundle["checkpoint"]["data"] == {"done": ["tests"], "next": "implementation"}
    assert bundle["attempts"][0]["state"] == "abandoned"


@pytest.mark.django_db(transaction=True)
def test_keep_lease_holds_the_task_for_longer_than_the_lease(live_server, flow):
    flow.ready(title="slow work")
    agent, rival = client(live_server, flow.agent), client(live_server, flow.agent2)
    attempt = agent.claim(lease_seconds=3)["attempt"]["id"]

    with agent.keep_lease(attempt, 3) as lease:
        time.sleep(4.5)  # longer than the lease: only the heartbeats keep it
        stolen = rival.claim()
        submitted = agent.submit(attempt, "done after a long think")

    assert stolen is None
    assert lease.lost is None and lease.beats >= 2
    assert submitted["state"] in ("checking", "passed")
    assert Attempt.objects.get(pk=attempt).state != "abandoned"


@pytest.mark.django_db(transaction=True)
def test_a_submit_inside_keep_lease_stops_the_heartbeats_so_none_reads_as_a_lost_lease(
    live_server, flow
):
    flow.ready(title="quick work")
    agent = client(live_server, flow.agent)
    attempt = agent.claim(lease_seconds=3)["attempt"]["id"]

    with agent.keep_lease(attempt, 3) as lease:
        agent.submit(attempt, "done at once")
        beats = lease.beats
        time.sleep(1.5)  # past the next heartbeat the keeper would have sent

    assert (lease.lost, lease.beats) == (None, beats)


@pytest.mark.django_db(transaction=True)
def test_keep_lease_reports_a_lost_lease_and_stops(live_server, flow):
    flow.ready(title="lost work")
    agent = client(live_server, flow.agent)
    attempt = agent.claim(lease_seconds=60)["attempt"]["id"]

    with agent.keep_lease(attempt, 3) as lease:
        expire_lease(Attempt.objects.get(pk=attempt))
        deadline = time.monotonic() + 10
        while lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.1)
        beats = lease.beats
        time.sleep(1.5)

    assert (lease.lost.status, lease.lost.code) == (409, "lease_lost")
    assert lease.beats == beats  # no heartbeat after the refusal


@pytest.mark.django_db(transaction=True)
def test_a_usage_report_the_site_refuses_does_not_read_as_a_lost_lease(live_server, flow):
    flow.ready(title="expensive work")
    agent = client(live_server, flow.agent)
    attempt = agent.claim(lease_seconds=3)["attempt"]["id"]

    class Usage:
        """One increment above the site's bound (FACTORY_USAGE_MAX_REPORT_USD, 100)."""

        def __init__(self):
            self.left, self.given = {"cost_usd": "5000"}, []

        def pending(self):
            return self.left

        def sent(self, increment):
            self.given.append(increment)
            self.left = None

    usage = Usage()
    with agent.keep_lease(attempt, 3, usage=usage) as lease:
        time.sleep(4.5)  # longer than the lease: only the heartbeats keep it

    assert lease.lost is None and lease.beats >= 2
    assert (lease.usage_refused.status, lease.usage_refused.code) == (400, "invalid")
    assert usage.given == [{"cost_usd": "5000"}]  # given up, as the site refused it
    held = Attempt.objects.get(pk=attempt)
    assert (held.state, held.usage) == ("running", {})
