"""Data migrations of interop: rows written before keep meaning what they meant."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from decisions.models import Decision
from interop.models import ImportRun
from tests.interop.test_import import adr, archive, upload


def migrate(target: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(target)


def legacy(origin: str) -> None:
    """Give the decision of ``origin`` and the report of the run that made it the old id."""
    old = "madr:" + origin.rsplit("/", 1)[-1]
    decision = Decision.objects.get(origin=origin)
    Decision.objects.filter(pk=decision.pk).update(
        origin=old, metadata={**decision.metadata, "id": old[5:]}
    )
    for run in ImportRun.objects.all():
        items = [{**i, "origin": old} if i["origin"] == origin else i for i in run.report["items"]]
        ImportRun.objects.filter(pk=run.pk).update(report={**run.report, "items": items})


@pytest.mark.django_db(transaction=True)
def test_decisions_imported_before_keep_matching_their_folder_on_re_import(flow):
    data = archive({"docs/adr/0013-use-kafka.md": adr("Use Kafka"), "0002-root.md": adr("Root")})
    upload(flow, "madr", data)
    migrate([("interop", "0001_initial")])
    legacy("madr:docs/adr/0013")

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    again = upload(flow, "madr", data)
    other = upload(flow, "madr", archive({"services/x/adr/0013-use-grpc.md": adr("Use gRPC")}))

    assert again.report["counts"] == {"created": 0, "updated": 0, "unchanged": 2, "skipped": 0}
    assert other.report["counts"]["created"] == 1
    kafka = Decision.objects.get(title="Use Kafka")
    assert (kafka.origin, kafka.metadata["id"]) == ("madr:docs/adr/0013", "docs/adr/0013")
    assert Decision.objects.get(title="Root").origin == "madr:0002"
