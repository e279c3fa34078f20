"""The batch's state machine: ``move``, the one way its state changes, and the machine
drawn from its transitions (``landing.models.Batch``): docs/landing.md shows ``drawing()``,
and tests/landing/test_states.py keeps it true."""

from django.db import transaction
from django_fsm import RETURN_VALUE

from landing.models import ACTIVE_BATCH_STATES, Batch, BatchState
from projects.fsm import fire


def move(batch: Batch, name: str, **kwargs) -> None:
    """Fire the batch's transition ``name`` as the system: its fields and its Event in one
    transaction (``projects.fsm.fire``). The only way a batch's state changes."""
    with transaction.atomic():
        fire(batch, name, actor=None, reason=kwargs.get("why", ""), **kwargs)


def edges() -> list[tuple[str, str, str]]:
    """``(source, target, transition)`` for every move a batch can make, sorted."""
    field = Batch._meta.get_field("state")
    found = set()
    for move in field.get_all_transitions(Batch):
        targets = (
            move.target.allowed_states if isinstance(move.target, RETURN_VALUE) else [move.target]
        )
        for target in targets:
            found.add((str(move.source), str(target), move.name))
    return sorted(found)


def drawing() -> str:
    """The machine as a Mermaid state diagram; ``[*]`` is a batch's creation, in ``building``."""
    lines = ["stateDiagram-v2", "    [*] --> building"]
    lines += [f"    {source} --> {target}: {name}" for source, target, name in edges()]
    ends = [state for state in BatchState.values if state not in ACTIVE_BATCH_STATES]
    lines += [f"    {end} --> [*]" for end in ends]
    return "\n".join(lines)
