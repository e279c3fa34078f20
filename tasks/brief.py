"""The context bundle as a brief: concise Markdown an agent reads well.

One block per bundle item, in the bundle's order (most relevant first), then a footer
with the bundle's sha256 and the items the budget left out. Pure functions of the
bundle's content: ``tasks.context`` measures each item with ``block`` when a brief is
asked for, so ``max_chars`` bounds the Markdown itself (only the task, which is always
included, can push a brief past a budget smaller than the task alone).
"""

import json

# How the reason of an attempt that its gates failed begins (tasks.attempts writes it).
GATES = "gates failed — "

# (bundle section, manifest kind), in the order the bundle lists its items.
SECTIONS = (
    ("task", "task"),
    ("spec", "spec_version"),
    ("checkpoint", "checkpoint"),
    ("decisions", "decision"),
    ("attempts", "attempt"),
    ("dependencies", "dependency"),
)
MESSAGE_CHARS = 200


def render(bundle: dict) -> str:
    """The whole brief of a bundle built by ``tasks.context.build``."""
    blocks = []
    for section, kind in SECTIONS:
        value = bundle[section]
        contents = value if isinstance(value, list) else [value] if value else []
        blocks += [block(kind, content) for content in contents]
    return "".join(blocks) + footer(
        bundle["bundle_sha256"], bundle["manifest"], bundle["max_chars"]
    )


def block(kind: str, content: dict) -> str:
    """One item's Markdown, ending in a blank line."""
    lines = BLOCKS[kind](content)
    return "\n".join(lines).strip("\n") + "\n\n"


def footer(sha256: str, manifest: list[dict], max_chars: int | None) -> str:
    budget = f"; budget {max_chars} characters" if max_chars else ""
    lines = ["---", f"Bundle sha256 `{sha256}`{budget}."]
    dropped = [mention(m["kind"], m["id"]) for m in manifest if not m["included"]]
    if dropped:
        lines.append(f"Left out by the budget: {', '.join(dropped)}.")
    return "\n".join(lines) + "\n"


def mention(kind: str, item_id: str) -> str:
    """How the footer names an item the budget left out."""
    return f"{kind} {item_id}"


# --- one function per kind of item ------------------------------------------------------


def _task(task: dict) -> list[str]:
    facts = [f"State: {task['state']}", f"priority {task['priority']}"]
    if task["labels"]:
        facts.append(f"labels: {', '.join(task['labels'])}")
    facts.append(f"failed attempts: {task['attempts_used']} of {task['max_attempts']}")
    paths = ", ".join(f"`{path}`" for path in task["allowed_paths"])
    lines = [
        f"# {task['key']}: {_line(task['title'])}",
        "",
        " · ".join(facts),
        f"Allowed paths (change nothing else): {paths}" if paths else "Allowed paths: any",
    ]
    if task["depends_on"]:
        lines.append(f"Depends on: {', '.join(task['depends_on'])}")
    if task["description"].strip():
        lines += ["", _demote(task["description"])]
    return lines


def _spec(spec: dict) -> list[str]:
    lines = [f"## Spec {spec['key']} v{spec['version']}: {_line(spec['title'])}", ""]
    if spec["body"].strip():
        lines += [_demote(spec["body"]), ""]
    lines.append("Acceptance criteria, each with the proof it needs:")
    lines += [f"- {c['key']} — {_line(c['text'])} — needs {c['needs']}" for c in spec["criteria"]]
    return lines


def _checkpoint(checkpoint: dict) -> list[str]:
    data = json.dumps(checkpoint["data"], indent=2, sort_keys=True, ensure_ascii=False)
    return [
        f"## Checkpoint to resume from (attempt #{checkpoint['attempt']}, "
        f"revision {checkpoint['revision']}, saved {checkpoint['saved_at']})",
        "",
        "```json",
        data,
        "```",
    ]


def _decision(decision: dict) -> list[str]:
    lines = [
        f"## Decision {decision['key']}: {_line(decision['title'])}",
        "",
        _demote(decision["decision"]),
    ]
    if decision["consequences"].strip():
        lines += ["", f"Consequences: {_line(decision['consequences'])}"]
    rejected = [
        f"{_line(a.get('option', ''))} ({_line(a.get('reason', ''))})"
        if a.get("reason")
        else _line(a.get("option", ""))
        for a in decision["alternatives"]
        if isinstance(a, dict)
    ]
    if rejected:
        lines.append(f"Rejected alternatives: {'; '.join(rejected)}")
    return lines


def _attempt(attempt: dict) -> list[str]:
    review = attempt.get("review")
    lines = [f"## Earlier attempt #{attempt['number']}: {attempt['state']}", ""]
    failed = [gate for gate in attempt["gates"] if "verdict" in gate]
    ended = f"By {attempt['agent']}."
    # Said once: a rejection's reason is the review's, failed gates are listed below. An
    # attempt that failed otherwise with a gate failed (a counted close of its pull request
    # while it was checked) keeps its own reason.
    told = (review and review["reason"] == attempt["ended_because"]) or (
        failed and attempt["state"] == "failed" and attempt["ended_because"].startswith(GATES)
    )
    if attempt["ended_because"] and not told:
        ended += f" Ended because: {_line(attempt['ended_because'])}"
    lines.append(ended)
    if attempt["summary"].strip():
        lines.append(f"Summary: {_line(attempt['summary'])}")
    if attempt["change"]:
        lines.append(
            "Change: " + ", ".join(f"{k} {v}" for k, v in sorted(attempt["change"].items()))
        )
    if failed:
        lines.append("Failed gates:")
    for gate in failed:
        lines.append(f"- {gate['gate']} ({gate['state']}): {_line(gate['summary'])}")
        lines += [
            f"  - `{test}`" + (f" — {_line(message)[:MESSAGE_CHARS]}" if message else "")
            for test, message in failing_tests(gate["verdict"])
        ]
    passed = [gate["gate"] for gate in attempt["gates"] if gate["state"] == "passed"]
    if passed:
        lines.append(f"Gates passed: {', '.join(passed)}")
    unfinished = [
        f"{gate['gate']} ({gate['state']})"
        for gate in attempt["gates"]
        if "verdict" not in gate and gate["state"] != "passed"
    ]
    if unfinished:
        lines.append(f"Gates not finished: {', '.join(unfinished)}")
    if review:
        by = review["by"] or "a reviewer"
        if review["verdict"] == "reject":
            lines.append(f"Reviewer {by} rejected it: {_line(review['reason'])}")
        else:
            lines.append(f"Reviewer {by} approved it.")
    lines += _landing(attempt.get("landing"))
    judged = [
        c
        for c in attempt.get("criteria") or []
        if c["by"] == "reviewer" or c["verdict"] == "not_met"
    ]
    if judged:
        lines.append("Criteria as the reviewer judged them (not met first):")
        for c in judged:
            mark = " " if c["verdict"] == "not_met" else "x"
            verdict = {"met": "met", "not_met": "NOT MET", "na": "not applicable"}[c["verdict"]]
            note = f" — {_line(c['note'])}" if c["note"] else ""
            lines.append(f"- [{mark}] {c['key']} {verdict}{note}")
    comments = attempt.get("comments") or []
    if comments:
        lines.append("Line comments (open first):")
        for c in comments:
            span = f"{c['line']}" if c["line"] == c["end_line"] else f"{c['line']}-{c['end_line']}"
            side = " (old)" if c["side"] == "old" else ""
            mark = "x" if c["resolved"] else " "
            lines.append(f"- [{mark}] `{c['path']}:{span}`{side} {_line(c['text'])}")
    if attempt["evidence"]:
        lines.append(
            "Evidence: "
            + ", ".join(
                f"#{ev['id']} {ev['kind']} `{ev['name']}` ({ev['provenance']})"
                for ev in attempt["evidence"]
            )
            + " — at /api/v1/evidence/{id}/content/"
        )
    return lines


def _landing(landing: dict | None) -> list[str]:
    """Where the approved change went: landed, or back with the reason and what to do."""
    if not landing:
        return []
    state = landing.get("state")
    if state == "landed":
        return [f"Landed at {landing.get('landed', '')[:12]}."]
    if state not in ("conflict", "failed"):
        return [
            f"Landing: {state}"
            + (f" — {_line(landing['reason'])}" if landing.get("reason") else "")
        ]
    lines = [f"It came back from landing: {_line(landing.get('reason', ''))}"]
    if landing.get("what_to_do"):
        lines.append(f"What to do: {landing['what_to_do']}.")
    for test in landing.get("failing") or []:
        lines.append(f"  - `{test}`")
    for test in landing.get("flaky") or []:
        lines.append(f"  - `{test}` (flaky: it failed and then passed at one tree)")
    for hunk in landing.get("hunks") or []:
        lines += [f"Conflict in `{hunk['path']}`:", "```", _demote(hunk["text"]), "```"]
    return lines


def _dependency(dependency: dict) -> list[str]:
    lines = [
        f"## Dependency {dependency['key']}: {_line(dependency['title'])} ({dependency['state']})"
    ]
    outcome = dependency.get("outcome")
    if outcome:
        lines.append("")
        lines.append(f"Outcome: {_line(outcome['summary'])}")
        if outcome["change"]:
            lines.append(
                "Change: " + ", ".join(f"{k} {v}" for k, v in sorted(outcome["change"].items()))
            )
    return lines


BLOCKS = {
    "task": _task,
    "spec_version": _spec,
    "checkpoint": _checkpoint,
    "decision": _decision,
    "attempt": _attempt,
    "dependency": _dependency,
}


def failing_tests(verdict) -> list[tuple[str, str]]:
    """(test id, message) of each failing test a gate's verdict names.

    tests-pass lists ``failed`` entries with ``test`` and ``message``; the runner gate
    names them in ``tests.failing``. Other gates name none.
    """
    if not isinstance(verdict, dict):
        return []
    failed = verdict.get("failed")
    if isinstance(failed, list):
        return [
            (str(f.get("test", "?")), str(f.get("message") or ""))
            for f in failed
            if isinstance(f, dict)
        ]
    tests = verdict.get("tests")
    if isinstance(tests, dict) and isinstance(tests.get("failing"), list):
        return [(str(name), "") for name in tests["failing"]]
    return []


def _line(text) -> str:
    """Free text on one line."""
    return " ".join(str(text).split())


def _demote(text: str) -> str:
    """Free Markdown with its headings pushed below the brief's own (## and deeper)."""
    lines, fenced = [], False
    for line in text.strip("\n").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            line = "##" + line
        lines.append(line)
    return "\n".join(lines)
