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
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from projects import services as project_services
    from tasks import services

    User = get_user_model()
    # The runner verifies every submission at its commit, and landing needs it in the policy.
    project = project_services.project_create(
        slug="PL",
        name="landing proof",
        repository_url=args.repository,
        verify=VERIFY,
        gate_policy={"runner": {"required": True}},
        max_attempts=50,
    )
    manager = User.objects.create_user("proof-manager")
    reviewer = User.objects.create_user("proof-reviewer")
    project_services.membership_grant(user=manager, project=project, role="manager")
    project_services.membership_grant(user=reviewer, project=project, role="reviewer")
    project_services.project_update(
        project=project,
        actor=manager,
        landing={"mode": "push", "method": "squash", "batch_max": args.batch_max},
        claim_avoid_overlap=args.avoid_overlap == "on",
    )
    agents = []
    for n in range(args.agents):
        agent = User.objects.create_user(f"proof-agent-{n}")
        project_services.membership_grant(user=agent, project=project, role="agent")
        agents.append(AuthToken.objects.create(user=agent, expiry=None)[1])
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
    out = {
        "agents": agents,
        "reviewer": AuthToken.objects.create(user=reviewer, expiry=None)[1],
        "manager": AuthToken.objects.create(user=manager, expiry=None)[1],
    }
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
