"""What one call of the GitHub provider costs, against the stand-in on loopback: a read
(``repository``), a check run created, and a pull request opened then updated. The
stand-in validates every exchange, so these are upper bounds of the provider's own cost.

    uv run python bench/code_host_calls.py

Prints JSON: milliseconds per call, p50 and p95 over ``ROUNDS`` calls of each.
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codehosts.providers.github import GitHubHost
from tests.github_standin import app_key
from tests.github_standin.server import StandIn
from tests.github_standin.world import World

ROUNDS = 50


def timed(call) -> dict:
    took = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        call()
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return {
        "p50_ms": round(statistics.median(took), 2),
        "p95_ms": round(took[int(ROUNDS * 0.95)], 2),
    }


def main() -> None:
    world = World(Path(tempfile.mkdtemp()), 1, [app_key()[1]], "factory-memory")
    standin = StandIn(world).start()
    repo = world.repository("octo-org/widgets")
    repo.git.commit("main", {"README.md": "widgets\n"}, "start")
    repo.git.commit("fm/WID-1", {"a.py": "a = 1\n"}, "change", start="main")
    installation = world.install("octo-org", ["octo-org/widgets"])
    host = GitHubHost(
        api_url=standin.url,
        repository="octo-org/widgets",
        app_id=1,
        installation_id=installation.id,
        private_keys=(app_key()[0],),
    )
    host.repository()  # the installation token is minted once, outside the rounds
    sha = repo.git.head("main")
    results = {
        "repository": timed(host.repository),
        "check_run_created": timed(
            lambda: host.check_run(name="ci", head_sha=sha, status="queued")
        ),
        "pull_request_opened_or_updated": timed(
            lambda: host.open_or_update_pull_request(
                task="WID-1", head="fm/WID-1", base="main", title="t", body="b", draft=False
            )
        ),
    }
    standin.stop()
    print(json.dumps({"rounds": ROUNDS, **results}, indent=1))


if __name__ == "__main__":
    main()
