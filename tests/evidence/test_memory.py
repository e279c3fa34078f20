"""A 500 MB evidence file is uploaded, gated and viewed without the process growing by 64 MiB.

Memory is measured as bench/upload.py measures a gunicorn worker: the peak resident size
(VmHWM) after, minus the resident size (VmRSS) before. The peak is reset first through
/proc/self/clear_refs, so the figure is this test's own. The files are made on the fly in
a temporary directory; the screenshot is sparse, the JUnit report is moved into the store
as an upload is, not copied. About 30 s on the development machine.
"""

import re
from pathlib import Path

import pytest
from django.core.files import File

from evidence import services, storage
from evidence.models import Evidence, blob_name
from projects.policy import registry

SIZE = 500 * 1000 * 1000  # 500 MB
LIMIT_MIB = 64
PASSING = (
    b'<testcase classname="tests.test_other" name="test_%07d" time="0.01">'
    b"<system-out>" + b"output of a chatty test " * 80 + b"</system-out></testcase>\n"
)
LAST = (
    b'<testcase classname="tests.test_claim" name="test_claims_once" time="0.1"/>\n'
    b'<testcase classname="tests.test_claim" name="test_breaks" time="0.1">'
    b'<failure message="assert 1 == 2">trace</failure></testcase>\n</testsuite>\n'
)


def kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1))


class Peak:
    """Growth of this process's peak memory since ``start``, in MiB."""

    def start(self):
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to VmRSS
        except OSError:
            pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak")
        self.before = kib("VmRSS")

    def growth_mib(self) -> float:
        return (kib("VmHWM") - self.before) / 1024


class Upload(File):
    """A finished upload: the store moves it into place instead of copying it."""

    def temporary_file_path(self):
        return self.file.name


def junit_report(path: Path) -> Path:
    cases = b"".join(PASSING % n for n in range(500))
    with path.open("wb") as out:
        out.write(b'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="big">\n')
        while out.tell() < SIZE - len(LAST):
            out.write(cases)
        out.write(LAST)
    return path


def drain(response) -> int:
    return sum(len(chunk) for chunk in response.streaming_content)


@pytest.mark.django_db
def test_a_500_mb_junit_report_is_summarised_gated_and_viewed_in_bounded_memory(
    flow, client, tmp_path
):
    task, attempt = flow.claimed(spec=flow.spec())
    path = junit_report(tmp_path / "junit.xml")
    client.force_login(flow.reviewer)
    peak = Peak()
    peak.start()

    with path.open("rb") as handle:
        report = services.evidence_attach(
            attempt=attempt, actor=flow.agent, file=Upload(handle, name="junit.xml"), kind="junit"
        )
    verdict = registry()["tests-pass"].check(attempt, {}, {"tests-pass": {}})
    page = client.get(f"/tasks/{task.key}/")
    detail = client.get(f"/evidence/{report.pk}/")
    download = client.get(f"/api/v1/evidence/{report.pk}/content/")
    downloaded = drain(download)
    tail = client.get(f"/api/v1/evidence/{report.pk}/content/", HTTP_RANGE="bytes=-13")

    assert peak.growth_mib() < LIMIT_MIB
    assert report.size >= SIZE and report.summary["failed"] == 1
    assert (verdict.passed, verdict.details["unmatched_criteria"]) == (False, [])
    assert (
        verdict.summary
        == f"1 of {report.summary['tests']} tests failed: tests/test_claim.py::test_breaks"
    )
    assert "too large to show here" in page.content.decode() + detail.content.decode()
    assert downloaded == report.size
    assert (tail.status_code, b"".join(tail.streaming_content)) == (206, b"</testsuite>\n")


@pytest.mark.django_db
def test_a_500_mb_screenshot_is_streamed_in_bounded_memory(flow, client, settings):
    _, attempt = flow.claimed()
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x02\xd0\x00\x00\x01,\x08\x02\x00\x00\x00"
    name = blob_name("0" * 64)
    blob = Path(settings.MEDIA_ROOT) / name
    blob.parent.mkdir(parents=True)
    with blob.open("wb") as out:  # sparse: the zeros after the header take no disk
        out.write(png)
        out.truncate(SIZE)
    shot = Evidence.objects.create(
        attempt=attempt,
        kind="screenshot",
        file=name,
        sha256="0" * 64,
        size=SIZE,
        media_type="image/png",
        name="huge.png",
        provenance="agent",
        summary={"format": "png", "width": 720, "height": 300},
    )
    client.force_login(flow.reviewer)
    peak = Peak()
    peak.start()

    response = client.get(f"/evidence/{shot.pk}/image/")
    streamed = drain(response)

    assert peak.growth_mib() < LIMIT_MIB
    assert (response.status_code, streamed) == (200, SIZE)
    assert storage.open_blob(name).read(8) == png[:8]
