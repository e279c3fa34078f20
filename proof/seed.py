"""Create a proof run's project through the services: agents, a reviewer, tokens, ready tasks.

python -m proof.seed --tasks N --agents M --out tokens.json   (DATABASE_URL set)

With ``--webhook URL``, a subscription to every event type of the project, made after the
tasks are published, points at URL; its id and secret go into the JSON as ``webhook``.
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gates", default='{"tests-pass": {}, "diff-scope": {}}')
    parser.add_argument("--webhook", default="", help="a receiver's URL to subscribe")
    args = parser.parse_args()
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from events import services as events_services
    from projects import services as project_services
    from tasks import services

    User = get_user_model()
    project = project_services.project_create(
        slug="PF", name="proof", gate_policy=json.loads(args.gates), max_attempts=50
    )
    manager = User.objects.create_user("proof-manager")
    reviewer = User.objects.create_user("proof-reviewer")
    project_services.membership_grant(user=manager, project=project, role="manager")
    project_services.membership_grant(user=reviewer, project=project, role="reviewer")
    agents = []
    for n in range(args.agents):
        agent = User.objects.create_user(f"proof-agent-{n}")
        project_services.membership_grant(user=agent, project=project, role="agent")
        agents.append(AuthToken.objects.create(user=agent, expiry=None)[1])
    for n in range(args.tasks):
        task = services.task_create(
            project=project,
            actor=manager,
            title=f"proof task {n}",
            allowed_paths=["tasks/**"],
            priority=n % 3,
        )
        services.task_publish(task=task, actor=manager)
    out = {"agents": agents, "reviewer": AuthToken.objects.create(user=reviewer, expiry=None)[1]}
    if args.webhook:
        subscription = events_services.subscription_create(
            project=project, actor=manager, url=args.webhook, types=[]
        )
        out["webhook"] = {"id": subscription.pk, "secret": subscription.secret}
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
