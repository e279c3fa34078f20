from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from projects.tokens import token_issue


class Command(BaseCommand):
    help = (
        "Issue an API token for a user and print it once; only its hash is stored. "
        "Its lifetime is bounded by the user's role (FACTORY_TOKEN_MAX_DAYS_*) and a user "
        "holds at most FACTORY_TOKEN_MAX_PER_USER unexpired tokens."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--days",
            type=int,
            help="days until it expires (default FACTORY_TOKEN_TTL_DAYS, within the role's bound)",
        )

    def handle(self, *args, username, days, **options):
        User = get_user_model()
        try:
            user = User.objects.get(username=username, is_active=True)
        except User.DoesNotExist as exc:
            raise CommandError(f"no active user {username!r}") from exc
        try:
            token_row, token = token_issue(user=user, days=days)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        when = token_row.expiry.strftime("%Y-%m-%d %H:%M UTC")
        self.stderr.write(f"Token for {username} (expires {when}); it is shown only once:")
        self.stdout.write(token)
