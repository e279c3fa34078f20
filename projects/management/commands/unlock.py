from axes.utils import reset
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Lift a login lockout now: forget the failed logins of USERNAME (and/or of an "
        "address, --address). Without this the lock ends by itself after "
        "FACTORY_LOGIN_COOLOFF_MINUTES. Wraps django-axes' reset."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="*", help="usernames to unlock")
        parser.add_argument(
            "--address", action="append", default=[], help="a client address to unlock (repeat)"
        )

    def handle(self, *args, username, address, **options):
        if not username and not address:
            raise CommandError("name a USERNAME or an --address to unlock")
        for name in username:
            self._report(name, reset(username=name))
        for ip in address:
            self._report(ip, reset(ip=ip))

    def _report(self, who: str, cleared: int) -> None:
        if cleared:
            self.stdout.write(f"{who}: unlocked")
        else:
            self.stdout.write(f"{who}: was not locked (no failed logins recorded)")
