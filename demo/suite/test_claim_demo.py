import pytest
from claimqueue import claim, release


def make(key, priority=0, created=0, depends_on=()):
    return {
        "key": key,
        "state": "ready",
        "priority": priority,
        "created": created,
        "depends_on": list(depends_on),
    }


def test_claim_takes_highest_priority_first():
    tasks = [make("FM-1", priority=0), make("FM-2", priority=5)]
    assert claim(tasks, done=set())["key"] == "FM-2"


def test_two_claims_get_different_tasks():
    tasks = [make("FM-1"), make("FM-2", created=1)]
    first, second = claim(tasks, done=set()), claim(tasks, done=set())
    assert {first["key"], second["key"]} == {"FM-1", "FM-2"}


def test_claim_skips_tasks_with_open_dependencies():
    tasks = [make("FM-2", priority=9, depends_on=["FM-1"]), make("FM-3")]
    assert claim(tasks, done=set())["key"] == "FM-3"


def test_release_returns_task_to_ready():
    task = claim([make("FM-1")], done=set())
    assert release(task)["state"] == "ready"


def test_release_refuses_a_ready_task():
    with pytest.raises(ValueError, match="not claimed"):
        release(make("FM-1"))
