"""Upload throughput of a 1 GiB file through the API against ``cp`` on the same disk.

    uv run python bench/upload.py [--mib 1024]

The file is text (base64 lines, like a big log). The upload goes through gunicorn
(one worker, so its memory is the server's) with curl, a client that costs little
CPU; ``cp`` copies the same file on the same disk in the same run — the write an
upload cannot avoid. Reports MiB/s for both, their ratio, the worker's peak memory
growth (VmHWM after minus VmRSS before), and whether the stored SHA-256 equals
``openssl dgst -sha256``. Prints JSON.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import drop_database, gunicorn, setup_django


def rss_kib(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1))


def worker_pid(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return int(children[0])


def make_file(path: Path, mib: int) -> None:
    with path.open("wb") as out:
        proc = subprocess.Popen(["base64", "/dev/urandom"], stdout=subprocess.PIPE)
        remaining = mib * 1024 * 1024
        while remaining:
            chunk = proc.stdout.read(min(remaining, 4 * 1024 * 1024))
            out.write(chunk)
            remaining -= len(chunk)
        proc.kill()
        proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    args = parser.parse_args()
    work = Path(
        tempfile.mkdtemp(prefix="factory-bench-upload-", dir=os.environ.get("BENCH_DIR", "/work"))
    )
    media, uploads = work / "media", work / "uploads"
    url = setup_django("upload")
    from django.conf import settings
    from knox.models import AuthToken

    from projects import services as project_services
    from tasks import attempts, services
    from tests.factories import UserFactory

    settings.MEDIA_ROOT = str(media)
    project = project_services.project_create(slug="UB", name="upload bench", gate_policy={})
    manager, agent = UserFactory(username="m"), UserFactory(username="a")
    project_services.membership_grant(user=manager, project=project, role="manager")
    project_services.membership_grant(user=agent, project=project, role="agent")
    services.task_publish(
        task=services.task_create(project=project, actor=manager, title="upload"), actor=manager
    )
    attempt = attempts.task_claim(agent=agent, lease_seconds=3600)
    token = AuthToken.objects.create(user=agent, expiry=None)[1]

    source = work / "big.log"
    make_file(source, args.mib)
    size = source.stat().st_size
    openssl = subprocess.run(
        ["openssl", "dgst", "-sha256", "-r", str(source)],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = openssl.stdout.split()[0]

    start = time.perf_counter()
    shutil.copyfile(source, work / "copy.log")  # what cp does: read and write every byte once
    cp_seconds = time.perf_counter() - start
    (work / "copy.log").unlink()

    env = {"MEDIA_ROOT": str(media), "FACTORY_UPLOAD_TEMP_DIR": str(uploads)}
    with gunicorn(url, workers=1, extra_env=env, extra_args=["--timeout", "600"]) as (base, master):
        worker = worker_pid(master.pid)
        # Warm the worker (imports, URL resolver, first DB connection) so the growth
        # measured below is the upload's own.
        subprocess.run(
            [
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-H",
                f"Authorization: Bearer {token}",
                f"{base}/api/v1/attempts/{attempt.pk}/",
            ],
            check=True,
        )
        rss_before = rss_kib(worker, "VmRSS")
        start = time.perf_counter()
        curl = subprocess.run(
            [
                "curl",
                "-sS",
                "-H",
                f"Authorization: Bearer {token}",
                "-F",
                f"file=@{source};type=text/plain",
                "-F",
                "kind=log",
                f"{base}/api/v1/attempts/{attempt.pk}/evidence/",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        upload_seconds = time.perf_counter() - start
        peak = rss_kib(worker, "VmHWM")
    body = json.loads(curl.stdout)
    stored = media / "evidence" / body["sha256"][:2] / body["sha256"][2:4] / body["sha256"]
    leftovers = [p.name for p in uploads.iterdir()] if uploads.exists() else []
    mib = size / 1024 / 1024
    result = {
        "size_mib": round(mib, 1),
        "cp": {"seconds": round(cp_seconds, 2), "mib_per_s": round(mib / cp_seconds, 1)},
        "upload": {
            "seconds": round(upload_seconds, 2),
            "mib_per_s": round(mib / upload_seconds, 1),
        },
        "ratio_upload_to_cp": round(cp_seconds / upload_seconds, 3),
        "server_peak_memory_growth_mib": round((peak - rss_before) / 1024, 1),
        "sha256_matches_openssl": body["sha256"] == expected,
        "stored_size_matches": stored.stat().st_size == size,
        "temporary_files_left": leftovers,
        "target": {"ratio": 0.5, "memory_growth_mib": 64},
    }
    result["meets_target"] = (
        result["ratio_upload_to_cp"] >= 0.5 and result["server_peak_memory_growth_mib"] <= 64
    )
    print(json.dumps(result, indent=2))
    shutil.rmtree(work)
    drop_database("upload")


if __name__ == "__main__":
    main()
