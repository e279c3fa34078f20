from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from knox.models import AuthToken
from knox.settings import knox_settings


class Command(BaseCommand):
    help = "Issue an API token for a user and print it once; only its hash is stored."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--days",
            type=int,
            help=f"days until it expires (default {knox_settings.TOKEN_TTL.days}); 0 never expires",
        )

    def handle(self, *args, username, days, **options):
        User = get_user_model()
        try:
            user = User.objects.get(username=username, is_active=True)
        except User.DoesNotExist as exc:
            raise CommandError(f"no active user {username!r}") from exc
        if days is not None and days < 0:
            raise CommandError("--days must be 0 or more")
        expiry = (
            knox_settings.TOKEN_TTL if days is None else (timedelta(days=days) if days else None)
        )
        token_row, token = AuthToken.objects.create(user=user, expiry=expiry)
        when = token_row.expiry.strftime("%Y-%m-%d %H:%M UTC") if token_row.expiry else "never"
        self.stderr.write(f"Token for {username} (expires {when}); it is shown only once:")
        self.stdout.write(token)
