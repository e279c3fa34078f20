import secrets

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from projects.models import Project
from projects.roles import Role
from projects.services import membership_grant


class Command(BaseCommand):
    help = "Create a user (or reuse one) and give them a role in a project."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument("--project", required=True, help="project slug, e.g. FM")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--password",
            help="password for a new user; one is generated and printed when omitted",
        )

    def handle(self, *args, username, role, project, email, password, **options):
        try:
            project_obj = Project.objects.get(slug=project)
        except Project.DoesNotExist as exc:
            raise CommandError(f"no project with slug {project!r}") from exc
        User = get_user_model()
        with transaction.atomic():
            user, created = User.objects.get_or_create(username=username, defaults={"email": email})
            if created:
                password = password or secrets.token_urlsafe(12)
                user.set_password(password)
                user.save(update_fields=["password"])
            try:
                membership_grant(user=user, project=project_obj, role=role)
            except ValidationError as exc:
                raise CommandError("; ".join(exc.messages)) from exc
        if created:
            self.stdout.write(f"Created user {username} with password: {password}")
        self.stdout.write(f"{username} is {role} in {project_obj.slug}")
