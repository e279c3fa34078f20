"""Importing a 10,000-line beads file and a 200-ADR MADR folder, each beside a tenth of its
size, so that the queries per item can be seen to stay constant.

    uv run python bench/interop.py

On PostgreSQL. Each size is imported twice into a fresh project: a dry run (the default in
every face) and the application; then the same file again (every item unchanged). The
files are made from the real fixtures (tests/fixtures/interop): the beads lines are bd's own
issues, renumbered; the ADRs are elastisys' records, renumbered. Prints JSON.
"""

import io
import json
import time
import zipfile
from pathlib import Path

from common import drop_database, setup_django, team_project

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "interop"


def beads_file(lines: int) -> bytes:
    """``lines`` issues made from bd's own file, ids renumbered so each is new, blocks kept."""
    source = (FIXTURES / "beads" / "steveyegge-beads" / ".beads" / "issues.jsonl").read_text()
    issues = [json.loads(line) for line in source.splitlines() if line.strip()]
    out = []
    for n in range(lines):
        issue = dict(issues[n % len(issues)])
        round_ = n // len(issues)
        issue["id"] = f"{issue['id']}-{round_}"
        issue["dependencies"] = [
            {**d, "issue_id": issue["id"], "depends_on_id": f"{d['depends_on_id']}-{round_}"}
            for d in issue.get("dependencies") or []
        ]
        out.append(json.dumps(issue))
    return ("\n".join(out) + "\n").encode()


def madr_folder(records: int) -> bytes:
    """A zip of ``records`` ADRs made from elastisys' folder, numbered 1 to ``records``."""
    folder = FIXTURES / "madr" / "elastisys-compliantkubernetes" / "docs" / "adr"
    texts = [p.read_text() for p in sorted(folder.glob("0*.md"))]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for n in range(1, records + 1):
            archive.writestr(f"docs/decisions/{n:04d}-record-{n}.md", texts[n % len(texts)])
    return buffer.getvalue()


def measure(slug: str, format: str, name: str, data: bytes, items: int) -> dict:
    from django.db import connection

    from interop import services

    project, manager, *_ = team_project(slug, spec_body="# bench\n")
    result = {"items": items, "bytes": len(data)}
    for step, dry_run in (("dry_run", True), ("apply", False), ("again", False)):
        queries = []

        def count(execute, sql, params, many, context, queries=queries):
            queries.append(sql)
            return execute(sql, params, many, context)

        start = time.perf_counter()
        with connection.execute_wrapper(count):
            run = services.import_upload(
                project=project, actor=manager, format=format, name=name, data=data, dry_run=dry_run
            )
        seconds = time.perf_counter() - start
        result[step] = {
            "seconds": round(seconds, 3),
            "items_per_second": round(items / seconds, 1),
            "queries": len(queries),
            "queries_per_item": round(len(queries) / items, 3),
            "counts": run.report["counts"],
        }
    return result


def main():
    setup_django("interop")
    results = {
        "beads_1000": measure("BA", "beads", "issues.jsonl", beads_file(1_000), 1_000),
        "beads_10000": measure("BB", "beads", "issues.jsonl", beads_file(10_000), 10_000),
        "madr_20": measure("MA", "madr", "adrs.zip", madr_folder(20), 20),
        "madr_200": measure("MB", "madr", "adrs.zip", madr_folder(200), 200),
    }
    print(json.dumps(results, indent=2))
    drop_database("interop")


if __name__ == "__main__":
    main()
