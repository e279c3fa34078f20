"""gunicorn's settings, read from the working directory by every `gunicorn` started there
(the Procfile's `web`, the proofs): the command line gives the rest.

With PROMETHEUS_MULTIPROC_DIR set, a worker that exits is marked dead, so that live gauges
of its own would leave the sum; its counters and histograms stay in the directory and keep
counting (docs/operations.md, "Many processes").
"""

import os

from prometheus_client import multiprocess


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)
