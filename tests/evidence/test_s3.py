"""Evidence on an S3-compatible store: the same promises as on disk, against a real S3 API.

The store is moto's server on 127.0.0.1 (one per test session), each test with a bucket of
its own, versioned so that a rewrite or a delete would show as a second version or a
delete marker. The storage settings are the ones factory_site/settings.py makes of
``FACTORY_EVIDENCE_STORAGE=s3`` and its ``FACTORY_S3_*`` variables.
"""

import hashlib
import itertools
import os
import runpy
from pathlib import Path

import boto3
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from evidence import backends
from evidence.models import Evidence, blob_name
from projects.models import Event, Project
from runner.verify import Result
from tasks import attempts

SETTINGS = Path(__file__).resolve().parents[2] / "factory_site" / "settings.py"
DUMMY_AWS = {
    # Dummy keys, no profile files, no instance metadata: nothing can reach the real AWS.
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
JUNIT = (
    b'<testsuite name="s" tests="2"><testcase classname="tests.test_a" name="test_one"/>'
    b'<testcase classname="tests.test_a" name="test_two"><failure message="assert 1 == 2">'
    b"boom</failure></testcase></testsuite>"
)
LOG = b"".join(b"line %03d of the run\n" % n for n in range(200))
BUCKETS = itertools.count()


def settings_from(environment: dict) -> dict:
    """The globals factory_site/settings.py makes of the test's environment plus these."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        return runpy.run_path(str(SETTINGS))


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 API on a free loopback port, and the settings that point evidence at it."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    storage = settings_from(
        {
            "FACTORY_EVIDENCE_STORAGE": "s3",
            "FACTORY_S3_BUCKET": "placeholder",
            "FACTORY_S3_ENDPOINT_URL": endpoint,
            "FACTORY_S3_REGION": "us-east-1",
            "FACTORY_S3_ACCESS_KEY": "factory",
            "FACTORY_S3_SECRET_KEY": "factory-secret",
        }
    )["STORAGES"]["default"]
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="factory",
        aws_secret_access_key="factory-secret",
    )
    yield endpoint, storage, client
    server.stop()


class Bucket:
    def __init__(self, client, name):
        self.client, self.name = client, name

    def keys(self) -> list[str]:
        listed = self.client.list_objects_v2(Bucket=self.name)
        return sorted(item["Key"] for item in listed.get("Contents", ()))

    def versions(self, key) -> int:
        listed = self.client.list_object_versions(Bucket=self.name, Prefix=key)
        return len(listed.get("Versions", ()))

    def read(self, key) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()


@pytest.fixture
def bucket(s3_server, settings, monkeypatch):
    """A new versioned bucket, the site's evidence store for this test; no delete reaches it."""
    endpoint, storage, client = s3_server
    for name, value in DUMMY_AWS.items():
        monkeypatch.setenv(name, value)
    name = f"evidence-{next(BUCKETS)}"
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    options = {**storage["OPTIONS"], "bucket_name": name}
    settings.STORAGES = {**settings.STORAGES, "default": {**storage, "OPTIONS": options}}
    assert default_storage.connection.meta.client.meta.endpoint_url == endpoint
    yield Bucket(client, name)
    listed = client.list_object_versions(Bucket=name)
    assert listed.get("DeleteMarkers", []) == []


def upload(client, attempt, content, kind="log", name="run.log"):
    data = {"file": SimpleUploadedFile(name, content, content_type="text/html"), "kind": kind}
    return client.post(f"/api/v1/attempts/{attempt.pk}/evidence/", data, format="multipart")


def files_in(root) -> list[str]:
    return sorted(str(p) for p in Path(root).rglob("*") if p.is_file())


def test_settings_from_the_environment_make_the_s3_store(s3_server):
    _, storage, _ = s3_server

    with pytest.raises(ImproperlyConfigured, match="needs FACTORY_S3_BUCKET"):
        settings_from({"FACTORY_EVIDENCE_STORAGE": "s3", "FACTORY_S3_BUCKET": ""})

    assert storage["BACKEND"] == "evidence.backends.EvidenceS3Storage"
    assert {k: v for k, v in storage["OPTIONS"].items() if k != "endpoint_url"} == {
        "bucket_name": "placeholder",
        "region_name": "us-east-1",
        "addressing_style": "path",
        "location": "",
        "file_overwrite": False,
        "default_acl": None,
        "access_key": "factory",
        "secret_key": "factory-secret",
    }


@pytest.mark.django_db
def test_an_upload_lands_in_the_bucket_under_its_hash_with_the_exact_bytes(
    flow, api, bucket, settings
):
    _, attempt = flow.claimed()

    response = upload(api(flow.agent), attempt, LOG)

    assert response.status_code == 201
    digest = hashlib.sha256(LOG).hexdigest()
    assert (response.json()["sha256"], response.json()["size"]) == (digest, len(LOG))
    assert bucket.keys() == [blob_name(digest)]
    assert bucket.read(blob_name(digest)) == LOG
    head = bucket.client.head_object(Bucket=bucket.name, Key=blob_name(digest))
    assert head["ContentType"] == "application/octet-stream"  # never the uploader's text/html
    assert files_in(settings.MEDIA_ROOT) == []
    assert files_in(settings.FACTORY_UPLOAD_TEMP_DIR) == []


@pytest.mark.django_db
def test_the_same_bytes_twice_are_one_object_never_rewritten(flow, api, bucket):
    _, attempt = flow.claimed()
    client = api(flow.agent)
    name = blob_name(hashlib.sha256(LOG).hexdigest())

    first, second = upload(client, attempt, LOG), upload(client, attempt, LOG, name="again.log")
    # A request that lost the race past the existence check: the store's If-None-Match.
    raced = default_storage._save(name, ContentFile(b"other bytes"))

    assert (first.status_code, second.status_code, raced) == (201, 201, name)
    assert Evidence.objects.filter(sha256=first.json()["sha256"]).count() == 2
    assert (bucket.keys(), bucket.versions(name), bucket.read(name)) == ([name], 1, LOG)


@pytest.mark.django_db
def test_a_range_is_answered_206_with_the_exact_bytes_read_in_windows(
    flow, api, bucket, monkeypatch
):
    monkeypatch.setattr(backends, "WINDOW", 1000)  # several ranged GETs for one answer
    _, attempt = flow.claimed()
    evidence_id = upload(api(flow.agent), attempt, LOG).json()["id"]
    reviewer = api(flow.reviewer)
    url = f"/api/v1/evidence/{evidence_id}/content/"

    ranged = reviewer.get(url, HTTP_RANGE="bytes=990-3009")
    whole = reviewer.get(url)
    past = reviewer.get(url, HTTP_RANGE=f"bytes={len(LOG)}-")

    assert ranged.status_code == 206
    assert ranged["Content-Range"] == f"bytes 990-3009/{len(LOG)}"
    assert b"".join(ranged.streaming_content) == LOG[990:3010]
    assert (whole.status_code, whole["Content-Length"]) == (200, str(len(LOG)))
    assert b"".join(whole.streaming_content) == LOG
    assert (past.status_code, past["Content-Range"]) == (416, f"bytes */{len(LOG)}")


@pytest.mark.django_db
def test_the_runners_junit_lands_in_the_bucket_and_tests_pass_decides_on_it(
    flow, bucket, monkeypatch, settings, django_capture_on_commit_callbacks
):
    Project.objects.filter(pk=flow.project.pk).update(
        repository_url="https://git.example/repo.git",
        verify={"test": "pytest", "junit": "junit.xml", "timeout_seconds": 60},
    )
    flow.gates({"runner": {"required": True}, "tests-pass": {}})
    measured = Result(
        commit="c" * 40,
        base="b" * 40,
        mirror="fresh",
        junit=JUNIT,
        log=LOG,
        problems=["the tests failed"],
    )
    monkeypatch.setattr("runner.gates.runs", lambda *, project, commit: itertools.repeat(measured))
    _, attempt = flow.claimed()

    with django_capture_on_commit_callbacks(execute=True):
        attempts.attempt_submit(
            attempt=attempt, actor=attempt.agent, summary="done", change={"commit": "c" * 40}
        )

    runs = {run.gate: run for run in attempt.gate_runs.all()}
    assert (runs["tests-pass"].state, runs["tests-pass"].summary) == (
        "failed",
        "1 of 2 tests failed: tests/test_a.py::test_two",
    )
    stored = Evidence.objects.filter(attempt=attempt, provenance="runner").order_by("kind")
    junit = stored.get(kind="junit")
    assert runs["tests-pass"].verdict["decided_on"] == [junit.pk]
    assert {row.kind: bucket.read(row.file.name) for row in stored} == {"junit": JUNIT, "log": LOG}
    assert files_in(settings.MEDIA_ROOT) == []


@pytest.mark.django_db
def test_a_quota_refuses_an_oversize_upload_and_nothing_reaches_the_bucket(
    flow, api, bucket, settings
):
    settings.FACTORY_QUOTA_ATTEMPT_BYTES = len(LOG) - 1
    _, attempt = flow.claimed()
    events_before = Event.objects.count()

    response = upload(api(flow.agent), attempt, LOG)

    assert (response.status_code, response.json()["code"]) == (413, "quota_exceeded")
    assert (Evidence.objects.count(), Event.objects.count()) == (0, events_before)
    assert bucket.keys() == []


@pytest.mark.django_db
def test_the_store_refuses_to_delete_and_answers_a_readiness_probe(bucket):
    name = default_storage.save(blob_name("0" * 64), ContentFile(b"kept\n"))

    with pytest.raises(backends.DeleteRefused):
        default_storage.delete(name)

    assert (bucket.read(name), bucket.versions(name)) == (b"kept\n", 1)
    assert default_storage.exists(blob_name("f" * 64)) is False
    assert default_storage.listdir("evidence") == (["00"], [])
