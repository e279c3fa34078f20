from django.core.management.base import BaseCommand

from demo.runner_demo import SLUG as RUNNER_SLUG
from demo.seed import PASSWORD, SLUG, USERS, seed
from projects.models import Project


class Command(BaseCommand):
    help = (
        "Create the demo project (FM) with users, specs, decisions, tasks and real evidence, "
        "and the runner demo (RD) with a real git repository."
    )

    def handle(self, *args, **options):
        if not seed(self.stdout):
            self.stdout.write(f"The demo project {SLUG} exists already; nothing added.")
            return
        users = ", ".join(["admin", *USERS])
        self.stdout.write(self.style.SUCCESS(f"Demo project {SLUG} created."))
        if Project.objects.filter(slug=RUNNER_SLUG).exists():
            self.stdout.write(
                self.style.SUCCESS(
                    f"Runner demo {RUNNER_SLUG} created: {RUNNER_SLUG}-1 verified by the runner, "
                    f"{RUNNER_SLUG}-2 a false claim it caught."
                )
            )
        self.stdout.write(f"Users: {users} — password: {PASSWORD}")
