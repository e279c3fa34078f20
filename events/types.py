"""The event types the world outside hears, named ``noun.verb``, and which audit
Event each one is.

An audit Event is one transition of one state machine; the few that matter to
outsiders get a type here. One Event has at most one type, so a delivery (one per
event and subscription) has one stable ``webhook-id``.
"""

from projects.policy import declares

# (model label, transition, state reached or None for any) → type; the first match wins.
# A gate run's label may name what its gate declares (``evidence.gaterun:needs_commit``),
# never the gate's name (``projects.policy.declares``).
RULES: list[tuple[str, str, str | None, str]] = [
    ("tasks.task", "publish", None, "task.published"),
    ("tasks.task", "claim", None, "task.claimed"),
    ("tasks.task", "gates_passed", None, "task.in_review"),
    ("tasks.task", "gates_failed", "failed", "task.failed"),
    ("tasks.task", "approve", None, "task.approved"),
    ("tasks.task", "reject", None, "task.rejected"),
    ("tasks.task", "land", None, "task.landed"),
    ("tasks.task", "landing_returned", None, "landing.failed"),
    ("tasks.task", "dequeue", None, "task.dequeued"),
    ("tasks.task", "fast_lane", None, "landing.fast_lane"),
    ("tasks.task", "revert", None, "landing.reverted"),
    ("landing.lander", "pause", None, "landing.paused"),
    ("landing.lander", "unpause", None, "landing.resumed"),
    ("landing.flakytest", "quarantine", None, "landing.quarantined"),
    ("landing.flakytest", "release", None, "landing.released"),
    ("tasks.task", "block", None, "task.blocked"),
    ("tasks.task", "release", None, "task.released"),
    # A close past the task's free withdrawals counts: when it fails the task, that is the news.
    ("tasks.task", "withdraw", "failed", "task.failed"),
    ("tasks.task", "withdraw", None, "task.withdrawn"),
    ("tasks.task", "unblock", None, "task.unblocked"),
    ("tasks.task", "reopen", None, "task.reopened"),
    ("tasks.task", "cancel", None, "task.cancelled"),
    ("tasks.attempt", "submit", None, "attempt.submitted"),
    ("tasks.attempt", "gates_failed", None, "attempt.gates_failed"),
    ("tasks.attempt", "expire", None, "lease.expired"),
    ("tasks.task", "exhaust_budget", "failed", "task.failed"),
    ("tasks.attempt", "exhaust_budget", None, "budget.exhausted"),
    ("projects.project", "exhaust_budget", None, "budget.exhausted"),
    ("tasks.attempt", "void_usage", None, "usage.voided"),
    ("decisions.decision", "propose", None, "decision.proposed"),
    ("decisions.decision", "accept", None, "decision.accepted"),
    ("decisions.decision", "reject", None, "decision.rejected"),
    ("decisions.decision", "supersede", None, "decision.superseded"),
    ("decisions.specversion", "accept", None, "spec.version_accepted"),
    # A gate run's verdict; the runner's own gate (the one that measures) has a type of its own.
    ("evidence.gaterun:measures_repository", "*finish", None, "runner.finished"),
    ("evidence.gaterun", "*finish", None, "gate.finished"),
]

FINISHES = {"succeed", "fail", "crash"}

TYPES: list[str] = list(dict.fromkeys(rule[3] for rule in RULES))
# ``task.*``: every type of a noun, in a subscription or a stream's filter.
WILDCARDS: list[str] = list(dict.fromkeys(f"{t.split('.')[0]}.*" for t in TYPES))

DESCRIPTIONS = {
    "task.published": "a draft task became ready to claim",
    "task.claimed": "an agent claimed a task (a new attempt started)",
    "attempt.submitted": "an agent submitted its attempt; the gates start",
    "attempt.gates_failed": "a gate failed; the attempt ended",
    "task.in_review": "every gate passed; the task waits for a reviewer",
    "task.approved": "a reviewer approved the task: it is done, or queued to land",
    "task.landed": "the merge queue put the task's approved change on the target branch",
    "landing.failed": "the task's approved change could not land (a conflict, or tests failing "
    "once merged); it is ready again, with the reason",
    "task.dequeued": "a manager took the task out of the landing queue",
    "landing.fast_lane": "a manager put the task's queued change at the head of the queue "
    "(alone in its batch if asked); it is verified like every change",
    "landing.reverted": "a manager's revert of the task's landed change reached the target "
    "(verified there like any change); the task is ready again, with the reason",
    "landing.paused": "a manager paused the project's landing: approvals queue, nothing lands",
    "landing.resumed": "the project's landing resumed (a manager, or the pause's end)",
    "landing.quarantined": "a test was quarantined (by a manager, or by the project's rule "
    "after its flakes): its failures neither block nor blame",
    "landing.released": "a test left quarantine (a manager, or its passes in a row)",
    "task.rejected": "a reviewer rejected the attempt, with a reason",
    "task.failed": "the task's attempts are used up",
    "task.blocked": "the agent released the task as blocked",
    "task.released": "the agent gave the task back; it is ready again",
    "task.withdrawn": "a person closed the task's pull request on its code host: the attempt "
    "ended (without spending one of the task's attempts, unless its free withdrawals were "
    "used up); it is ready again, with the reason",
    "task.unblocked": "a manager unblocked the task; it is ready again",
    "task.reopened": "a manager reopened a failed task",
    "task.cancelled": "a manager cancelled the task",
    "decision.proposed": "a decision was proposed",
    "decision.accepted": "a decision was accepted",
    "decision.rejected": "a decision was rejected",
    "decision.superseded": "a later accepted decision superseded this one",
    "spec.version_accepted": "a spec version became the current one",
    "lease.expired": "an attempt's lease ran out without a heartbeat",
    "budget.exhausted": "a budget was reached, by self-reported cost: an attempt's cost reached "
    "its task's budget and the attempt ended (scope task), or a project's spend this month "
    "reached its budget and claims are refused (scope project; once when the spend crosses it)",
    "usage.voided": "a manager voided the usage an attempt had reported: it no longer counts "
    "toward any budget (a project refusing claims for its budget may take them again)",
    "gate.finished": "a gate run reached its verdict",
    "runner.finished": "Factory Memory's runner reached its verdict on the commit",
}


def type_of(label: str, transition: str, to_state: str, gate: str = "") -> str | None:
    """The type of an audit Event of model ``label`` (``"tasks.task"``), or None."""
    for rule_label, rule_transition, state, name in RULES:
        model, _, declared = rule_label.partition(":")
        if model != label or (declared and not declares(gate, declared)):
            continue
        if rule_transition == "*finish":
            if transition not in FINISHES:
                continue
        elif rule_transition != transition:
            continue
        if state is None or state == to_state:
            return name
    return None


def matches(wanted: list[str], name: str) -> bool:
    """Whether a subscription or stream that asked for ``wanted`` (empty: all) wants ``name``.

    ``task.*`` wants every ``task.`` type.
    """
    if not wanted:
        return True
    return any(w == name or (w.endswith(".*") and name.startswith(w[:-1])) for w in wanted)


def unknown(wanted: list[str]) -> list[str]:
    """The names in ``wanted`` that are neither a type nor a noun's wildcard."""
    return [name for name in wanted if name not in TYPES and name not in WILDCARDS]
