"""Memory and time of a web worker that takes, gates and shows one large evidence file.

    uv run python bench/evidence_memory.py [--mb 500] [--kind junit|diff] [--shape chatty|tiny]

The report is made on the fly: a JUnit report whose cases carry 2 KB of output each
("chatty") or are 100 bytes each ("tiny": five million tests in 500 MB, the worst case
for time), or a git-style diff. Through gunicorn (one worker; Celery eager, as in the
embedded site, so the gate runs inside the web worker) it is uploaded with curl, the
attempt is submitted (tests-pass or diff-scope runs on it), then the task page, the
evidence page and the whole download are fetched. Reports the worker's peak memory
growth (VmHWM after minus VmRSS before, as bench/upload.py measures it), each step's
seconds and the gate's verdict. Prints JSON.
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import drop_database, gunicorn, setup_django
from upload import rss_kib, worker_pid

CHATTY = (
    b'<testcase classname="tests.test_other" name="test_%07d" time="0.01">'
    b"<system-out>" + b"output of a chatty test " * 80 + b"</system-out></testcase>\n"
)
TINY = b'<testcase classname="tests.test_other.TestIt" name="test_%07d" time="0.001"/>\n'
JUNIT_END = (
    b'<testcase classname="tests.test_claim" name="test_claims_once" time="0.1"/>\n</testsuite>\n'
)
HUNK = "".join(f"-    value_{n} = compute(alpha)\n" for n in range(20)) + "".join(
    f"+    value_{n} = compute(beta)\n" for n in range(20)
)


def make_report(path: Path, kind: str, shape: str, size: int) -> None:
    with path.open("wb") as out:
        if kind == "junit":
            case = CHATTY if shape == "chatty" else TINY
            out.write(b'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="big">\n')
            n = 0
            while out.tell() < size - len(JUNIT_END):
                out.write(b"".join(case % (n + k) for k in range(1000)))
                n += 1000
            out.write(JUNIT_END)
            return
        n = 0
        while out.tell() < size:
            files = []
            for k in range(100):
                name = f"src/pkg{(n + k) // 1000}/module_{n + k}.py"
                files.append(
                    f"diff --git a/{name} b/{name}\nindex 1111111..2222222 100644\n"
                    f"--- a/{name}\n+++ b/{name}\n@@ -1,20 +1,20 @@\n{HUNK}"
                )
            out.write("".join(files).encode())
            n += 100


def curl(*args, capture=True) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "-f", *args], capture_output=capture, check=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--kind", choices=["junit", "diff"], default="junit")
    parser.add_argument("--shape", choices=["chatty", "tiny"], default="chatty")
    args = parser.parse_args()
    work = Path(
        tempfile.mkdtemp(prefix="factory-bench-evidence-", dir=os.environ.get("BENCH_DIR", "/work"))
    )
    media, uploads = work / "media", work / "uploads"
    url = setup_django("evidence_memory")
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore
    from knox.models import AuthToken

    from decisions import services as decisions
    from evidence.models import Evidence, GateRun
    from projects import services as project_services
    from tasks import attempts, services
    from tests.factories import CRITERIA, UserFactory

    settings.MEDIA_ROOT = str(media)
    gate = "tests-pass" if args.kind == "junit" else "diff-scope"
    project = project_services.project_create(
        slug="EM", name="evidence bench", gate_policy={gate: {}}
    )
    manager, agent, reviewer = (UserFactory(username=name) for name in ("m", "a", "r"))
    for user, role in ((manager, "manager"), (agent, "agent"), (reviewer, "reviewer")):
        project_services.membership_grant(user=user, project=project, role=role)
    spec = decisions.spec_create(
        project=project, actor=manager, title="spec", body="# Spec\n", criteria=CRITERIA
    )
    decisions.spec_version_accept(version=spec.versions.get(), actor=manager)
    task = services.task_create(
        project=project, actor=manager, title="big", spec=spec, allowed_paths=["src/**"]
    )
    services.task_publish(task=task, actor=manager)
    attempt = attempts.task_claim(agent=agent, lease_seconds=3600)
    token = AuthToken.objects.create(user=agent, expiry=None)[1]
    session = SessionStore()
    session.update(
        {
            SESSION_KEY: str(reviewer.pk),
            BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
            HASH_SESSION_KEY: reviewer.get_session_auth_hash(),
        }
    )
    session.create()
    cookie = f"sessionid={session.session_key}"
    bearer = f"Authorization: Bearer {token}"

    source = work / ("report.xml" if args.kind == "junit" else "change.diff")
    make_report(source, args.kind, args.shape, args.mb * 1000 * 1000)
    size = source.stat().st_size

    env = {"MEDIA_ROOT": str(media), "FACTORY_UPLOAD_TEMP_DIR": str(uploads)}
    seconds = {}
    with gunicorn(url, workers=1, extra_env=env, extra_args=["--timeout", "900"]) as (base, master):
        worker = worker_pid(master.pid)
        curl("-o", "/dev/null", "-H", bearer, f"{base}/api/v1/attempts/{attempt.pk}/")
        curl("-o", "/dev/null", "-b", cookie, f"{base}/tasks/{task.key}/")
        rss_before = rss_kib(worker, "VmRSS")

        def step(name, *curl_args):
            start = time.perf_counter()
            done = curl(*curl_args)
            seconds[name] = round(time.perf_counter() - start, 2)
            return done

        uploaded = step(
            "upload_and_summarise",
            "-H",
            bearer,
            "-F",
            f"file=@{source}",
            "-F",
            f"kind={args.kind}",
            f"{base}/api/v1/attempts/{attempt.pk}/evidence/",
        )
        evidence_id = json.loads(uploaded.stdout)["id"]
        step(
            "submit_and_gate",
            "-H",
            bearer,
            "-H",
            "Idempotency-Key: bench",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps({"summary": "a large report", "change": {}}),
            f"{base}/api/v1/attempts/{attempt.pk}/submit/",
        )
        page = step("task_page", "-b", cookie, f"{base}/tasks/{task.key}/")
        step("evidence_page", "-o", "/dev/null", "-b", cookie, f"{base}/evidence/{evidence_id}/")
        step(
            "download",
            "-o",
            "/dev/null",
            "-H",
            bearer,
            f"{base}/api/v1/evidence/{evidence_id}/content/",
        )
        peak = rss_kib(worker, "VmHWM")
    run = GateRun.objects.get(attempt=attempt, gate=gate)
    summary = Evidence.objects.get(pk=evidence_id).summary
    growth = round((peak - rss_before) / 1024, 1)
    result = {
        "kind": args.kind,
        "shape": args.shape if args.kind == "junit" else "diff",
        "size_mb": round(size / 1e6, 1),
        "items": summary.get("tests", summary.get("files_changed")),
        "seconds": seconds,
        "gate": {"name": gate, "state": run.state, "summary": run.summary[:200]},
        "page_links_instead_of_rendering": b"too large to show here" in page.stdout,
        "server_peak_memory_growth_mib": growth,
        "target": {"memory_growth_mib": 64},
        "meets_target": growth <= 64,
    }
    print(json.dumps(result, indent=2))
    shutil.rmtree(work)
    drop_database("evidence_memory")


if __name__ == "__main__":
    main()
