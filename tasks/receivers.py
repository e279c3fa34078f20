"""How tasks reacts to what happens below it: the seams of ADR 0011."""

from tasks import attempts
from tasks.models import Attempt


def conclude_when_gates_finish(sender, *, run, attempt_id: int, **kwargs) -> None:
    """A gate run finished: move its attempt on if it was the last one (idempotent)."""
    attempts.attempt_checks_conclude(attempt=Attempt(pk=attempt_id))
