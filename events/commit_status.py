"""The commit status a ``commit-status`` subscription posts: the shape GitHub, Gitea and
Forgejo take at ``POST …/statuses/{sha}`` (``state``, ``target_url``, ``description``,
``context``), for the attempt's commit, when the gates start, fail or pass, when the
review decides and when landing sends the change back; and for the commit the merge
queue put on the target when the task lands.
"""

# The event types a commit status is posted for, and the state each one posts.
STATES = {
    "attempt.submitted": "pending",
    "attempt.gates_failed": "failure",
    "task.in_review": "pending",
    "task.approved": "success",
    "task.rejected": "failure",
    "task.landed": "success",
    "landing.failed": "failure",
}


def _commit(payload: dict) -> str:
    data = payload["data"]
    if payload["type"] == "task.landed":
        return data.get("landed_commit") or ""
    return data.get("change", {}).get("commit") or ""


def wanted(type_name: str, payload: dict) -> bool:
    return type_name in STATES and bool(_commit(payload))


def url(template: str, payload: dict) -> str:
    """The subscription's URL with ``{sha}`` replaced by the commit; without ``{sha}``, the
    commit is its last path segment (``…/statuses`` → ``…/statuses/4be1c0d``)."""
    commit = _commit(payload)
    if "{sha}" in template:
        return template.replace("{sha}", commit)
    return template.rstrip("/") + "/" + commit


def body(payload: dict, context: str) -> dict:
    type_name, data = payload["type"], payload["data"]
    state = STATES[type_name]
    if type_name == "attempt.gates_failed":
        gates = data.get("gates") or []
        if any(g["state"] == "error" for g in gates):
            state = "error"
        description = "gates failed: " + ", ".join(g["gate"] for g in gates) if gates else ""
        description = description or data.get("reason") or "gates failed"
    else:
        description = {
            "attempt.submitted": "the gates are running",
            "task.in_review": "the gates passed; waiting for review",
            "task.approved": f"approved by {data.get('reviewer') or 'a reviewer'}",
            "task.rejected": f"rejected: {data.get('reason') or ''}".strip(),
            "task.landed": "landed by the merge queue: verified at this tree",
            "landing.failed": (data.get("landing") or {}).get("reason") or "landing failed",
        }[type_name]
    return {
        "state": state,
        "target_url": data["url"],
        "description": description[:140],  # the code hosts' limit
        "context": context,
    }
