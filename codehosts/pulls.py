"""A pull request per task (docs/code-hosts.md, "A pull request per task").

``pull_request_sync`` brings the host up to what the database says about one task: its
pull request from the newest submitted attempt's branch (title ``KEY: title``, body the
handoff, draft until the gates pass), a check run per finished gate run of that attempt,
and the reviewer's verdict as the check ``factory-memory/review`` plus a comment; a head
a person pushed there becomes their attempt first (``codehosts.pushes``). Otherwise it only
reads the database and writes to the host, so it runs again safely: what was posted is
remembered on ``TaskPullRequest.posted`` and updated rather than posted twice. Called by
jobs after the change it shows committed, never inside a request's transaction (ADR 0038).
"""

from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from codehosts.identities import user_for
from codehosts.models import TaskPullRequest
from codehosts.providers import Annotation, NotFound, provider_for
from codehosts.pushes import pull_request_pushed
from evidence.models import FINISHED_GATE_STATES, GateRunState
from evidence.selectors import criteria_status
from tasks import handoff
from tasks.attempts import attempt_withdraw
from tasks.landing import pull_noted
from tasks.models import Attempt, AttemptState, Task, TaskState

# A pull request whose checks were not all posted yet has synced "never".
NEVER = datetime(2000, 1, 1, tzinfo=UTC)
CHECK_PREFIX = "factory-memory/"
REVIEW_CHECK = f"{CHECK_PREFIX}review"
# Ready for review once the gates passed; draft before, and again after a rejection.
READY_STATES = {TaskState.IN_REVIEW, TaskState.APPROVED, TaskState.DONE}
MAX_ANNOTATIONS = 200  # per gate run; GitHub shows the first 50 per request, we send in chunks
# A task whose attempt a close withdraws: in an agent's hands or waiting for review.
WITHDRAWABLE = {TaskState.CLAIMED, TaskState.CHECKING, TaskState.IN_REVIEW}
CONCLUSIONS = {
    GateRunState.PASSED: "success",
    GateRunState.FAILED: "failure",
    GateRunState.ERROR: "failure",
}


def task_url(task: Task) -> str:
    return f"{settings.SITE_URL.rstrip('/')}{reverse('task-detail', args=[task.key])}"


def body(material: handoff.Material) -> str:
    """The pull request's body: the task's handoff answers (``tasks.handoff``) in Markdown,
    and the task's page. Everyone's text in it is quoted, never taken as the site's."""
    answers = handoff.answer(material)
    changed, why, still = answers["what_changed"], answers["why"], answers["what_remains_open"]
    lines = [f"Factory Memory task [{material.task.key}]({task_url(material.task)})", ""]
    lines += ["## What changed", ""]
    if changed:
        lines.append(f"Attempt {changed['attempt']} by {changed['agent']} ({changed['state']}):")
        lines += [f"> {line}" for line in (changed["summary"] or "(no summary)").splitlines()]
        lines += [f"- `{path}`" for path in changed["files"]]
    lines += ["", "## Why", ""]
    lines += [f"> {line}" for line in (why["task"] or "(no description)").splitlines()]
    if why["spec"]:
        lines.append(f"\nSpec {why['spec']['key']} version {why['spec']['version']}.")
    lines += [f"- decision {d['key']}: {d['title']}" for d in why["decisions"]]
    lines += ["", "## What remains open", "", f"State: {still['state']}; next: {still['next']}."]
    lines += [f"- failed gate {g['gate']}: {g['summary']}" for g in still["failed_gates"]]
    lines += [f"- open decision {d['key']}: {d['title']}" for d in still["proposed_decisions"]]
    lines += [f"- waits for {key}" for key in still["dependencies_open"]]
    if still["last_rejection"]:
        rejection = still["last_rejection"]
        lines.append(f"- {rejection['attempt']} was rejected: {rejection['reason']}")
    rows = criteria_status(
        material.attempt, evidence=material.evidence, runs=material.runs, criteria=material.criteria
    )
    if rows:
        lines += ["", "## Criteria and their evidence", ""]
        for row in rows:
            criterion = row["criterion"]
            proof = ", ".join(f"{e.kind} {e.name}" for e in row.get("evidence", [])) or "none yet"
            mark = "x" if row["met"] else " "
            lines.append(f"- [{mark}] {criterion.key}: {criterion.text} (evidence: {proof})")
    return "\n".join(lines)


def annotations(run) -> tuple[Annotation, ...]:
    """A failing test of a gate's verdict at its file, where the verdict names one (a test id
    ``path.py::name``); at its ``line`` where the report has one, else the file's first."""
    found = []
    for failed in (run.verdict or {}).get("failed", [])[:MAX_ANNOTATIONS]:
        if not isinstance(failed, dict):
            continue
        test = str(failed.get("test", ""))
        path = str(failed.get("file") or test.split("::", 1)[0])
        if "::" not in test and not failed.get("file"):
            continue
        line = failed.get("line")
        line = line if isinstance(line, int) and line > 0 else 1
        found.append(
            Annotation(
                path=path,
                start_line=line,
                end_line=line,
                level="failure",
                message=str(failed.get("message") or failed.get("outcome") or "failed")[:1000],
                title=test[:255],
            )
        )
    return tuple(found)


LANDED = ("landed", "reverted")  # an attempt's landing states once its change merged


def pull_request_sync(*, task_id: int, host=None) -> str:
    """Make the host show what the database says about one task; return what was done.

    Nothing happens for a project without a code host or an attempt without a branch.
    Raises the provider's ``HostError`` when the host refuses or cannot be asked: the
    caller (a job) retries, and the reconciler comes back to it later.
    """
    task = Task.objects.select_related("project").filter(pk=task_id).first()
    if task is None or (task.project.code_host or {}).get("provider", "none") == "none":
        return "no code host"
    material = handoff.load(task)
    attempt = material.attempt
    branch = (attempt.change or {}).get("branch") if attempt is not None else None
    if not branch:
        return "no branch to open a pull request from"
    link = TaskPullRequest.objects.filter(task=task).first()
    closed = (link.posted.get("closed") or {}) if link is not None else {}
    if closed and closed.get("number") == link.number and attempt.number <= closed["attempt"]:
        # A person closed it: the site does not open it again for the same work; the next
        # attempt's submission opens a new one.
        TaskPullRequest.objects.filter(pk=link.pk).update(synced_at=task.updated_at)
        return f"{task.key}: pull request #{link.number} was closed on the host"
    landing = attempt.landing or {}
    merged = pull_noted(landing).get("number")
    if link is not None and landing.get("state") in LANDED and merged == link.number:
        # The lander merged it (landing through the pull request, ADR 0041): its branch is
        # on the target, and a pull request opened from it again would be nobody's; a
        # manager's revert since (the task ready again) changes nothing of that. One a
        # sync racing the merge opened, whose close failed then, is closed now.
        host = host or provider_for(task.project)
        for stray in host.open_pull_requests(task=task.key, head=branch):
            host.close_pull_request(
                stray.number,
                f"Superseded: {task.key}'s change landed through #{link.number}. "
                "Closed by Factory Memory.",
            )
        TaskPullRequest.objects.filter(pk=link.pk).update(synced_at=task.updated_at)
        return f"{task.key}: pull request #{link.number} merged by the landing"
    host = host or provider_for(task.project)
    draft = task.state not in READY_STATES
    pull = host.open_or_update_pull_request(
        task=task.key,
        head=branch,
        base=task.project.landing_target,
        title=f"{task.key}: {task.title}"[:256],
        body=body(material),
        draft=draft,
    )
    overtaken = _overtaken(task, attempt)
    if overtaken:
        # While this sync talked to the host, a newer attempt was submitted or this one's
        # change landed (another process may have done it and synced): a pull request it
        # opened now, not the one the site knows, is closed rather than left open beside
        # it (a merged branch looks unproposed to the host), and nothing is kept.
        known = TaskPullRequest.objects.filter(task=task).values_list("number", flat=True)
        if pull.state == "open" and pull.number not in known:
            host.close_pull_request(
                pull.number,
                f"Superseded: {overtaken} while this pull request was being brought up to "
                "date. Closed by Factory Memory.",
            )
        return f"{task.key}: attempt {attempt.number} was overtaken: {overtaken}"
    if link is not None and link.number != pull.number:
        _close_superseded(host, task, attempt, link.number, pull.number)
    link = _remember(task, pull)
    # A head a person pushed is their attempt (codehosts.pushes): then what this sync read
    # is stale, and the task's change queues the next sync, which shows the new attempt.
    pushed, taken = pull_request_pushed(task=task, pull=pull, host=host)
    if taken:
        TaskPullRequest.objects.filter(pk=link.pk).update(synced_at=NEVER)
        return pushed
    posted = dict(link.posted.get(str(attempt.number), {}))
    checks = dict(posted.get("checks", {}))
    head_sha = _full_sha(attempt.change.get("commit")) or pull.head_sha
    for run in material.runs:
        posted_run = checks.get(run.gate) or {}
        if run.state not in FINISHED_GATE_STATES or posted_run.get("state") == run.state:
            continue
        # GitHub adds an update's annotations to those already there: sent once, at creation.
        check = host.check_run(
            name=f"{CHECK_PREFIX}{run.gate}",
            head_sha=head_sha,
            status="completed",
            conclusion=CONCLUSIONS[run.state],
            title=f"{run.gate}: {run.state}",
            summary=run.summary or run.state,
            annotations=() if posted_run else annotations(run),
            details_url=task_url(task),
            check_run_id=posted_run.get("id"),
        )
        checks[run.gate] = {"id": check.id, "state": run.state}
        posted["checks"] = checks
        _record(link, attempt.number, posted)
    if attempt.state in (AttemptState.APPROVED, AttemptState.REJECTED) and attempt.reviewed_by:
        approved = attempt.state == AttemptState.APPROVED
        reviewer = attempt.reviewed_by.get_username()
        verdict = "approved" if approved else "rejected"
        check = host.check_run(
            name=REVIEW_CHECK,
            head_sha=head_sha,
            status="completed",
            conclusion="success" if approved else "failure",
            title=f"{verdict} by {reviewer}",
            summary=f"{reviewer} {verdict} {attempt}: {attempt.end_reason}",
            details_url=task_url(task),
            check_run_id=posted.get("review"),
        )
        posted["review"] = check.id
        _record(link, attempt.number, posted)
        if "comment" not in posted:
            comment = host.comment(
                pull.number,
                f"{reviewer} {verdict} {attempt} on Factory Memory.\n\n> {attempt.end_reason}",
            )
            posted["comment"] = comment.id
            _record(link, attempt.number, posted)
    # The host now shows the task as it was when read: the reconciler looks again only
    # once the task changes after that (or when a step above failed before this line).
    TaskPullRequest.objects.filter(pk=link.pk).update(synced_at=task.updated_at)
    synced = f"{task.key}: pull request #{pull.number}{' (draft)' if pull.draft else ''}"
    return f"{pushed}; {synced}" if pushed else synced


def _overtaken(task: Task, attempt) -> str:
    """What happened to ``attempt`` since a sync read it, as the database says now: a newer
    attempt submitted, or its change landed (empty: nothing; the sync's picture holds)."""
    newest = (
        Attempt.objects.filter(task=task, submitted_at__isnull=False)
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )
    if newest != attempt.number:
        return f"{task.key}'s attempt {newest} was submitted"
    landing = Attempt.objects.filter(pk=attempt.pk).values_list("landing", flat=True).first()
    if (landing or {}).get("state") in LANDED and (attempt.landing or {}).get(
        "state"
    ) not in LANDED:
        return f"{task.key}'s change landed"
    return ""


def _close_superseded(host, task: Task, attempt, old: int, new: int) -> None:
    """The task's earlier pull request, still open, when an attempt from another branch
    opened ``new``: closed, saying where the work went on (before the link moves to the new
    one, so a job that fails here closes it at its next try). A close in the site's own
    name withdraws nothing (``pull_request_closed``)."""
    earlier = host.pull_request(old)
    if earlier.state == "open":
        host.close_pull_request(
            old,
            f"Superseded by #{new}: {task.key}'s attempt {attempt.number} is proposed there "
            "(from another branch). Closed by Factory Memory.",
        )


def pull_request_closed(*, task: Task, pull, host) -> str:
    """A person closed the task's pull request without merging it (``pull`` as the host
    answered it now, never a payload's word); return what was done.

    The task's live attempt (claimed, checking or in review) that started before the close
    is withdrawn (``tasks.attempts.attempt_withdraw``): the task is ready again, the
    attempt not counted against ``max_attempts``, and the reason — ``pull request #N closed
    on GitHub by @login (member here)``, the closer as the host's issue answer names them
    (and the member their account number is, ``identities.user_for``), else without a name —
    reaches the next attempt's context. Past the task's free withdrawals
    (``tasks.attempts.WITHDRAWALS_FREE``), or when the closer is the attempt's own agent,
    the attempt fails instead, as a rejected one would, and the reason says why. An
    approved, landing or done task is left as it is: the review on the site decided it.
    The close is remembered on the link (``posted["closed"]``: number, when, by whom, the
    newest attempt then), so the same close read again withdraws nothing more and the
    site does not open the pull request again for that work; the next attempt's
    submission opens a new one.
    """
    link = TaskPullRequest.objects.filter(task=task).first()
    if link is None or link.number != pull.number:
        return f"{task.key}: pull request #{pull.number} is closed; it is not the task's now"
    closed = link.posted.get("closed") or {}
    if closed.get("number") == pull.number and closed.get("at") == pull.closed_at:
        return f"{task.key}: pull request #{pull.number} closed; acted on already"
    closer, closer_id = _closer(host, pull.number)
    member = user_for(task.project, host_id=closer_id) if closer_id is not None else None
    here = f" ({member.get_username()} here)" if member is not None else ""
    reason = f"pull request #{pull.number} closed on GitHub" + (
        f" by @{closer}{here}" if closer else ""
    )
    if pull.merged or (closer and closer == pull.author):
        # Merged is not withdrawn; and the site's own account opened it, so a close in that
        # name is the site's, not a person's.
        reason = ""
    when = _when(pull.closed_at)
    with transaction.atomic():
        task = Task.objects.select_for_update(no_key=True, of=("self",)).get(pk=task.pk)
        attempt = task.current_attempt
        withdrawn = (
            bool(reason)
            and attempt is not None
            and task.state in WITHDRAWABLE
            and (when is None or attempt.started_at.replace(microsecond=0) <= when)
            and attempt_withdraw(
                attempt=attempt,
                reason=reason,
                by_its_agent=member is not None and member.pk == attempt.agent_id,
            )
        )
        locked = TaskPullRequest.objects.select_for_update(no_key=True, of=("self",)).get(
            pk=link.pk
        )
        record = {"number": pull.number, "at": pull.closed_at, "by": closer}
        locked.posted = {**locked.posted, "closed": {**record, "attempt": task.attempt_count}}
        locked.save(update_fields=["posted"])
    if withdrawn:
        state, ended = Attempt.objects.values_list("state", "end_reason").get(pk=attempt.pk)
        if state == AttemptState.FAILED:  # past the task's free withdrawals: it counted
            return f"{task.key}: {ended}; attempt {attempt.number} failed"
        return f"{task.key}: {reason}; attempt {attempt.number} withdrawn"
    if pull.merged:
        return f"{task.key}: pull request #{pull.number} merged; the task is {task.state}, kept"
    if not reason:
        return f"{task.key}: pull request #{pull.number} closed by the site's own account"
    return f"{task.key}: pull request #{pull.number} closed; the task is {task.state}, kept"


def pull_request_reopened(*, task: Task, number: int) -> None:
    """The task's pull request is open again (a person reopened it): the site shows the
    task there again. Nothing withdrawn comes back; the next attempt updates it."""
    with transaction.atomic():
        link = (
            TaskPullRequest.objects.select_for_update(no_key=True, of=("self",))
            .filter(task=task)
            .first()
        )
        if link is not None and (link.posted.get("closed") or {}).get("number") == number:
            link.posted = {k: v for k, v in link.posted.items() if k != "closed"}
            link.save(update_fields=["posted"])


def _closer(host, number: int) -> tuple[str, int | None]:
    """Who closed it (login, account number), as the host's issue answer says (a pull
    request's answer does not)."""
    try:
        issue = host.issue(number)
    except NotFound:
        return "", None
    return issue.closed_by, issue.closed_by_id


def _when(closed_at) -> datetime | None:
    try:
        return datetime.fromisoformat(closed_at.replace("Z", "+00:00")) if closed_at else None
    except ValueError:
        return None


def _full_sha(commit) -> str:
    return commit if isinstance(commit, str) and len(commit) in (40, 64) else ""


def _remember(task: Task, pull) -> TaskPullRequest:
    link, _ = TaskPullRequest.objects.update_or_create(
        task=task,
        defaults={
            "number": pull.number,
            "url": pull.url,
            "head_sha": pull.head_sha,
            "draft": pull.draft,
        },
        create_defaults={
            "number": pull.number,
            "url": pull.url,
            "head_sha": pull.head_sha,
            "draft": pull.draft,
            "synced_at": NEVER,
        },
    )
    return link


def _record(link: TaskPullRequest, number: int, posted: dict) -> None:
    # Saved after each post, so a failure later in the same run does not post it again.
    link.record(lambda now: {**now, str(number): posted})
