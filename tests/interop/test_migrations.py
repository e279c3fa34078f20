"""Data migrations of interop: rows written before keep meaning what they meant."""

import re

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from decisions.models import Decision, Spec
from interop import services
from interop.models import ImportRun
from tasks.models import Task
from tests.interop.test_import import SPECKIT_REPOSITORY, adr, archive, repository, upload

NAMED = re.compile(r"^(madr|beads|speckit|openspec):[A-Za-z0-9][A-Za-z0-9._-]{0,63}:")


def migrate(target: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(target)


def migrate_to_the_end() -> None:
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def runs():
    # ImportRun as it is now has columns the older schema lacks.
    return ImportRun.objects.only("pk", "report")


def before_names() -> None:
    """Origins as they were before uploads had names, on the rows and in the runs' reports."""
    for model in (Decision, Spec, Task):
        for row in model.objects.only("pk", "origin"):
            model.objects.filter(pk=row.pk).update(origin=NAMED.sub(r"\1:", row.origin))
    for run in runs():
        items = [{**i, "origin": NAMED.sub(r"\1:", i["origin"])} for i in run.report["items"]]
        runs().filter(pk=run.pk).update(report={**run.report, "items": items})


def before_folders(origin: str) -> None:
    """Give the decision of ``origin`` and the report of the run that made it the id it had
    before MADR origins named their folder (``madr:0013``)."""
    old = "madr:" + origin.rsplit("/", 1)[-1]
    decision = Decision.objects.get(origin=origin)
    Decision.objects.filter(pk=decision.pk).update(
        origin=old, metadata={**decision.metadata, "id": old[5:]}
    )
    for run in runs():
        items = [{**i, "origin": old} if i["origin"] == origin else i for i in run.report["items"]]
        runs().filter(pk=run.pk).update(report={**run.report, "items": items})


@pytest.mark.django_db(transaction=True)
def test_decisions_imported_before_keep_matching_their_folder_on_re_import(flow):
    data = archive({"docs/adr/0013-use-kafka.md": adr("Use Kafka"), "0002-root.md": adr("Root")})
    upload(flow, "madr", data)
    migrate([("interop", "0001_initial")])
    before_names()
    before_folders("madr:docs/adr/0013")

    migrate_to_the_end()
    again = upload(flow, "madr", data)
    other = upload(flow, "madr", archive({"services/x/adr/0013-use-grpc.md": adr("Use gRPC")}))

    assert again.report["counts"] == {"created": 0, "updated": 0, "unchanged": 2, "skipped": 0}
    assert other.report["counts"]["created"] == 1
    kafka = Decision.objects.get(title="Use Kafka")
    assert (kafka.origin, kafka.metadata["id"]) == ("madr:upload:docs/adr/0013", "docs/adr/0013")
    assert Decision.objects.get(title="Root").origin == "madr:upload:0002"


@pytest.mark.django_db(transaction=True)
def test_an_upload_from_before_origins_had_names_matches_its_rows_again_after(flow):
    log_a = archive({"docs/decisions/0013-use-kafka.md": adr("Use Kafka")})
    specs_a = repository(SPECKIT_REPOSITORY, "sign in")
    beads = b'{"id":"api-1","title":"Rate limits","status":"open"}\n'
    upload(flow, "madr", log_a, name="service-a.zip")
    upload(flow, "speckit", specs_a, name="Service A (1).zip")
    upload(flow, "beads", beads, name="issues.jsonl")
    pending = upload(flow, "madr", log_a, name="service-a.zip", dry_run=True)
    migrate([("interop", "0003_import_runs_expire")])
    before_names()

    migrate_to_the_end()
    again = [
        upload(flow, "madr", log_a, name="service-a.zip"),
        upload(flow, "speckit", specs_a, name="Service A (1).zip"),
        upload(flow, "beads", beads, name="issues.jsonl"),
        services.import_apply(run=ImportRun.objects.get(pk=pending.pk), actor=flow.manager),
    ]
    log_b = archive({"docs/decisions/0013-use-grpc.md": adr("Use gRPC")})
    other = upload(flow, "madr", log_b, name="service-b.zip")

    assert [run.report["counts"]["unchanged"] for run in again] == [1, 2, 1, 1]
    assert [run.report["counts"]["created"] + run.report["counts"]["skipped"] for run in again] == [
        0,
        0,
        0,
        0,
    ]
    assert other.report["counts"] == {"created": 1, "updated": 0, "unchanged": 0, "skipped": 0}
    assert sorted(
        [
            *Decision.objects.values_list("origin", flat=True),
            *Spec.objects.values_list("origin", flat=True),
            *Task.objects.values_list("origin", flat=True),
        ]
    ) == [
        "beads:issues:api-1",
        "madr:service-a:docs/decisions/0013",
        "madr:service-b:docs/decisions/0013",
        "speckit:Service-A-1:001-login",
        "speckit:Service-A-1:001-login/T001",
    ]


@pytest.mark.django_db(transaction=True)
def test_origins_that_have_names_keep_them_when_the_migration_runs_again(flow):
    upload(flow, "madr", archive({"docs/decisions/0013-use-kafka.md": adr("Use Kafka")}))
    beads = b'{"id":"api-1","title":"Rate limits","status":"open"}\n'
    upload(flow, "beads", beads, name="issues.jsonl", origin_name="service-a")
    migrate([("interop", "0003_import_runs_expire")])

    migrate_to_the_end()

    assert sorted(
        [*Decision.objects.values_list("origin", flat=True), Task.objects.get().origin]
    ) == [
        "beads:service-a:api-1",
        "madr:upload:docs/decisions/0013",
    ]
