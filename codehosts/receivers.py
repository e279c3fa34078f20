"""The codehosts app listens to the kernel's one seam upward (ADR 0013): a change the
host should show starts a job once its transaction commits (ADR 0038)."""

from evidence.models import FINISHED_GATE_STATES
from projects.models import Project
from projects.queue import enqueue_on_commit

SYNC_JOB = "codehosts.jobs.pull_request_sync_job"
CLOSE_JOB = "codehosts.jobs.issue_close_job"
LINE_JOB = "codehosts.jobs.line_comment_post_job"
# What a task's pull request shows: its attempt, draft or ready, and the review.
TASK_TRANSITIONS = {
    "submit",
    "gates_passed",
    "gates_failed",
    "approve",
    "reject",
    "requeue",
    "land",
    "landing_returned",
    "dequeue",
    "pushed",
}


def sync_on_event(sender, *, event, subject, **kwargs) -> None:
    """Queue the task's pull request sync after commit, for a project with a code host;
    a reviewer's new line comment queues its post on the pull request instead.

    No I/O here: the receiver runs inside the transaction that wrote the event, and a
    host call there would hold the row locks for as long as the host takes, and would
    be made for a change that may yet roll back.
    """
    if event.task_id is None or event.project_id is None:
        return
    label = subject._meta.label
    comment = label == "tasks.LineComment" and event.transition == "comment"
    wanted = (
        comment
        or (label == "tasks.Task" and event.transition in TASK_TRANSITIONS)
        or (label == "evidence.GateRun" and event.to_state in FINISHED_GATE_STATES)
    )
    if not wanted:
        return
    if not Project.objects.filter(pk=event.project_id, code_host__provider="github").exists():
        return
    if comment:
        enqueue_on_commit(LINE_JOB, subject.pk, robust=True)
        return
    task_id = event.task_id
    enqueue_on_commit(SYNC_JOB, task_id, robust=True)
    if (
        label == "tasks.Task"
        and event.transition == "land"
        and subject.origin.startswith("github:")
    ):
        # A task made from an issue closes it once its change is on the target.
        enqueue_on_commit(CLOSE_JOB, task_id, robust=True)
