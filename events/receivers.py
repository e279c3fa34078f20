"""The events app listens to the kernel's one seam upward (ADR 0013)."""

from events.services import outbox_write


def write_outbox(sender, *, event, subject, **kwargs) -> None:
    outbox_write(event=event, subject=subject)
