"""Create the code-host proof's project through the services: the stand-in's repository,
the runner, the GitHub code host following the label ``factory``, landing through pull
requests, agents and a reviewer, and the manager's GitHub account linked (``--person``). The tasks come from the issues (the host's sweep).

python -m proof.code_host_seed --agents M --repository URL --api URL --installation N --out F
    [--person LOGIN]
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")

KEY_ENV = "FACTORY_HOST_PROOF_APP_KEY"
HOOK_ENV = "FACTORY_HOST_PROOF_HOOK"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--repository", required=True, help="the stand-in's bare repository")
    parser.add_argument("--api", required=True, help="the stand-in's address")
    parser.add_argument("--full-name", required=True, help="owner/name on the stand-in")
    parser.add_argument("--app", type=int, required=True)
    parser.add_argument("--installation", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--person", default="", help="a GitHub login linked to the manager")
    args = parser.parse_args()
    import django

    django.setup()
    from projects import services as project_services
    from proof.landing_seed import staffed_project

    project, manager, out = staffed_project(
        slug="GH", name="code-host proof", repository=args.repository, agents=args.agents
    )
    # Saved through the services, which ask the stand-in at save (permissions, the target's
    # protection), as a manager's save would.
    project_services.project_update(
        project=project,
        actor=manager,
        code_host={
            "provider": "github",
            "api_url": args.api,
            "repository": args.full_name,
            "app_id": args.app,
            "installation_id": args.installation,
            "private_key_env": KEY_ENV,
            "webhook_secret_env": HOOK_ENV,
            "issues": {"label": "factory"},
        },
    )
    project.refresh_from_db()
    if args.person:
        # A member of the team with a GitHub account (the manager here): their pushes to a
        # task's pull request are attempts in their name.
        from codehosts.identities import host_account_link

        host_account_link(actor=manager, project=project, login=args.person, user=manager)
    project_services.project_update(
        project=project, actor=manager, landing={"mode": "pull_request", "method": "squash"}
    )
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
