import json

from django.core.management.base import BaseCommand

from tasks.services import reconcile


class Command(BaseCommand):
    help = (
        "Expire overdue leases, re-run gates whose worker died, re-send lost gate jobs, "
        "conclude finished checks. Celery beat runs the same every FACTORY_RECONCILE_SECONDS."
    )

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(reconcile(), sort_keys=True))
