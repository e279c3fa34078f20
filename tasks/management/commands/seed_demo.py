from django.core.management.base import BaseCommand

from tasks.demo.seed import PASSWORD, SLUG, USERS, seed


class Command(BaseCommand):
    help = "Create the demo project (FM) with users, specs, decisions, tasks and real evidence."

    def handle(self, *args, **options):
        if not seed(self.stdout):
            self.stdout.write(f"The demo project {SLUG} exists already; nothing added.")
            return
        users = ", ".join(["admin", *USERS])
        self.stdout.write(self.style.SUCCESS(f"Demo project {SLUG} created."))
        self.stdout.write(f"Users: {users} — password: {PASSWORD}")
