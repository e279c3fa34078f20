"""The kernel's one seam upward (ADR 0013).

``event_recorded`` is sent by ``Event.record`` inside the transaction that wrote the
event, with ``event``. A receiver's writes join that transaction, so they commit or roll
back with the change they report: the ``events`` app writes the webhook deliveries it
owes (its outbox) and wakes the live stream there. A receiver must not do I/O.
"""

from django.dispatch import Signal

event_recorded = Signal()
