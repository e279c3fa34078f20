"""The Markdown brief's size beside the JSON bundle's, for every demo task.

    uv run python bench/brief.py [--max-chars 8000]

Seeds the demo (``demo.seed``, with the runner demo when a sandbox is available)
into a temporary SQLite database and builds each task's bundle as a reviewer reads it
(every earlier attempt included), without a budget: the brief's characters
(``tasks.brief``) next to ``json.dumps`` of the bundle, and whether the brief names
every criterion of the task's spec with the proof it needs. Prints JSON.
"""

import argparse
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-chars", type=int, default=8000, help="the size every brief must fit in"
    )
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="factory-brief-")
    os.chmod(work, 0o711)  # the runner demo's sandbox user passes through to its root
    os.environ.update(
        DATABASE_URL=f"sqlite:///{work}/db.sqlite3",
        MEDIA_ROOT=f"{work}/media",
        FACTORY_RUNNER_ROOT=f"{work}/runner",
        LOG_LEVEL="WARNING",
        # The seed runs each gate itself: no background thread may run the runner beside it.
        FACTORY_EAGER_BACKGROUND_QUEUES="",
    )
    # The production settings need a key; this one process keeps its own (unused) rate counts.
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("FACTORY_SINGLE_PROCESS", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from demo.seed import seed
    from tasks import brief, context
    from tasks.models import Task

    call_command("migrate", verbosity=0)
    with open(os.devnull, "w") as out:
        seed(out)

    tasks = []
    for task in Task.objects.select_related("project").order_by("project__slug", "number"):
        bundle = context.build(task, current=None)
        text = brief.render(context.build(task, current=None, markdown=True))
        criteria = bundle["spec"]["criteria"] if bundle["spec"] else []
        named = [
            c["key"]
            for c in criteria
            if f"- {c['key']} — {c['text']} — needs {c['needs']}\n" in text
        ]
        tasks.append(
            {
                "task": task.key,
                "state": task.state,
                "brief_chars": len(text),
                "json_chars": len(json.dumps(bundle)),
                "criteria": len(criteria),
                "criteria_named": len(named),
                "attempts": len(bundle["attempts"]),
                "decisions": len(bundle["decisions"]),
            }
        )
    print(
        json.dumps(
            {
                "max_chars": args.max_chars,
                "tasks": tasks,
                "largest_brief_chars": max(t["brief_chars"] for t in tasks),
                "brief_to_json": round(
                    sum(t["brief_chars"] for t in tasks) / sum(t["json_chars"] for t in tasks), 3
                ),
                f"all_within_{args.max_chars}": all(
                    t["brief_chars"] <= args.max_chars for t in tasks
                ),
                "every_criterion_named": all(t["criteria_named"] == t["criteria"] for t in tasks),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
