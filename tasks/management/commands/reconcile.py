import json

from django.core.management.base import BaseCommand

from tasks.reconciler import housekeeping, reconcile


class Command(BaseCommand):
    help = (
        "Expire overdue leases, re-run gates whose worker died, re-send lost gate jobs, "
        "conclude finished checks; then delete expired tokens and sweep dead runners' "
        "workspaces. Celery beat runs the first every FACTORY_RECONCILE_SECONDS and the "
        "second every FACTORY_HOUSEKEEPING_SECONDS."
    )

    def handle(self, *args, **options):
        self.stdout.write(json.dumps({**reconcile(), **housekeeping()}, sort_keys=True))
