"""The one seam between evidence and the app above it (ADR 0011).

``gate_run_finished`` is sent after a gate run's verdict has been committed, with
``run`` (the finished GateRun) and ``attempt_id``. Evidence knows nothing of what an
attempt does next; ``tasks`` listens and moves the attempt on once every gate of it has
finished (``tasks.attempts.attempt_checks_conclude``).
"""

from django.dispatch import Signal

gate_run_finished = Signal()
