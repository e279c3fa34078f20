"""Starting a Celery worker process as production runs one: the one way the proofs, the
benchmarks and the worker tests start workers.

Prefork with one process (a crash of the job kills only its child), no heartbeat, mingle
or gossip (quicker to start and stop), listening on the given queue only, in a session
of its own so that it and its pool children can be killed together.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def celery_worker(
    *, env: dict, queue: str, name: str, log=subprocess.DEVNULL, loglevel: str = "WARNING"
) -> subprocess.Popen:
    """A worker of the site in ``env`` (its settings come from there), taking ``queue``."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "factory_site", "worker"),
            *("-n", name, "--pool", "prefork", "--concurrency", "1", "-Q", queue),
            *("--without-heartbeat", "--without-mingle", "--without-gossip"),
            *("--loglevel", loglevel),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
