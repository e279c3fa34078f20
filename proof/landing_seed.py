"""Create the landing proof's project through the services: a repository, the runner,
landing on, agents, a reviewer, and the planned tasks in claim order.

python -m proof.landing_seed --plan plan.json --agents M --repository URL --out tokens.json
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")

VERIFY = {"test": "python3 run_tests.py", "junit": "reports/junit.xml", "timeout_seconds": 30}


def staffed_project(*, slug: str, name: str, repository: str, agents: int):
    """A project on ``repository`` whose runner verifies every submission at its commit,
    with a manager, a reviewer and ``agents`` agents; ``(project, manager, tokens)``,
    ``tokens`` being what the proof's processes sign in with (``agents``, ``reviewer``,
    ``manager``). Call after ``django.setup()``."""
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from projects import services as project_services

    User = get_user_model()
    project = project_services.project_create(
        slug=slug,
        name=name,
        repository_url=repository,
        verify=VERIFY,
        gate_policy={"runner": {"required": True}},
        max_attempts=50,
    )
    people = {"manager": User.objects.create_user("proof-manager")}
    people["reviewer"] = User.objects.create_user("proof-reviewer")
    for role, user in people.items():
        project_services.membership_grant(user=user, project=project, role=role)
    tokens = {"agents": []}
    for n in range(agents):
        agent = User.objects.create_user(f"proof-agent-{n}")
        project_services.membership_grant(user=agent, project=project, role="agent")
        tokens["agents"].append(AuthToken.objects.create(user=agent, expiry=None)[1])
    for role, user in people.items():
        tokens[role] = AuthToken.objects.create(user=user, expiry=None)[1]
    return project, people["manager"], tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--repository", required=True)
    parser.add_argument("--batch-max", type=int, default=4)
    parser.add_argument("--avoid-overlap", choices=["on", "off"], default="off")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import django

    django.setup()
    from projects import services as project_services
    from tasks import services

    # The runner verifies every submission at its commit, and landing needs it in the policy.
    project, manager, out = staffed_project(
        slug="PL", name="landing proof", repository=args.repository, agents=args.agents
    )
    project_services.project_update(
        project=project,
        actor=manager,
        landing={"mode": "push", "method": "squash", "batch_max": args.batch_max},
        claim_avoid_overlap=args.avoid_overlap == "on",
    )
    for item in json.loads(args.plan.read_text()):
        task = services.task_create(
            project=project,
            actor=manager,
            title=item["title"],
            description=json.dumps(item["spec"]),
            allowed_paths=item["paths"],
        )
        if not item["spec"].get("held"):  # held ones are published while main is red
            services.task_publish(task=task, actor=manager)
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
