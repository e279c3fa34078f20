"""What the tests of the review UI's task pages share (tests/tasks/test_views_*.py)."""

from tasks.models import Task

JUNIT_PASSED = (
    b'<testsuite tests="1"><testcase classname="tests.test_claim" name="test_ok"/></testsuite>'
)


def html(response) -> str:
    return response.content.decode()


def state_of(task) -> str:
    return Task.objects.get(pk=task.pk).state


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def queries_for(client, path, assert_max) -> int:
    client.get(path)  # warms the per-process caches (content types) first
    with assert_max(15) as captured:
        assert client.get(path).status_code == 200
    return len(captured.captured_queries)
