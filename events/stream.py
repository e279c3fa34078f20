"""The live stream's engine: one listener per web process, many clients.

The hub waits for new audit events — PostgreSQL ``LISTEN factory_events`` (the outbox
``NOTIFY``s each typed event's id when its transaction commits), or a poll of the event
table on SQLite and behind a pooler in transaction mode (``DATABASE_POOL_MODE``) —
reads each batch once, builds its envelopes once, and offers them to every connected
client whose projects and types want them. A client is a bounded queue: one that stops
reading falls ``FACTORY_STREAM_BACKLOG`` events behind and is dropped. No client holds
a database connection: the hub's reads run in a worker thread that closes its connection
when done, and the listener's one connection is shared.
"""

import asyncio
import logging
import time
import weakref

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections

from events.payloads import envelope
from events.services import STREAM_CHANNEL
from events.types import matches, type_of
from projects.models import Event

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # SQLite, and PostgreSQL's safety net between notifications


def _closing(function):
    """Run ``function`` in a worker thread, closing that thread's connection after."""

    def run(*args):
        try:
            return function(*args)
        finally:
            connections.close_all()

    return sync_to_async(run, thread_sensitive=False)


def typed(events) -> list[tuple[int, int, dict]]:
    """``(event id, project id, envelope)`` for each event that has a type."""
    items = []
    for event in events:
        subject = event.subject
        if subject is None:  # a subject deleted since (a webhook subscription)
            continue
        label = event.content_type.app_label + "." + event.content_type.model
        name = type_of(label, event.transition, event.to_state, getattr(subject, "gate", ""))
        if name is not None:
            items.append(
                (
                    event.pk,
                    event.project_id,
                    envelope(event, subject, name, project_slug=event.project.slug),
                )
            )
    return items


def _events():
    return Event.objects.select_related("project", "actor", "content_type").prefetch_related(
        "subject"
    )


def read_by_ids(ids: list[int]):
    return typed(_events().filter(pk__in=ids).order_by("pk"))


def read_new(last: int, project_ids=None, limit: int = 2000) -> tuple[list, int]:
    """The typed events after ``last`` (of ``project_ids``, when given) and the newest id
    read, typed or not: the position to read on from, so an event is neither read twice
    nor skipped."""
    rows = _events().filter(pk__gt=last).order_by("pk")
    if project_ids is not None:
        rows = rows.filter(project_id__in=project_ids)
    rows = list(rows[:limit])
    return typed(rows), (rows[-1].pk if rows else last)


def read_after(last: int, project_ids=None, limit: int = 2000):
    """The typed events after ``last`` (a stream's backlog since its Last-Event-ID)."""
    return read_new(last, project_ids, limit)[0]


def newest_id() -> int:
    return Event.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


STARTING_SECONDS = 30  # a client whose answer has not started streaming by then never will


class Client:
    """One connected stream: whose it is, what it may see, and what waits to be sent to it.

    ``project_ids`` only shrinks: the stream re-checks its credential and memberships
    (``events.views``) and drops the projects its user has left.
    """

    def __init__(self, project_ids: set[int], types: list[str], user_id: int | None = None):
        self.project_ids = project_ids
        self.types = types
        self.user_id = user_id
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=settings.FACTORY_STREAM_BACKLOG)
        self.dropped = False
        self.task: asyncio.Task | None = None
        self.joined_at = time.monotonic()

    def wants(self, project_id: int, payload: dict) -> bool:
        return project_id in self.project_ids and matches(self.types, payload["type"])

    def offer(self, item) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.dropped = True  # it stopped reading: let it go rather than buffer forever
            if self.task is not None:
                self.task.cancel()


class Hub:
    """The event loop's one listener (a server process has one loop). It runs while at
    least one client is connected."""

    def __init__(self):
        self.clients: set[Client] = set()
        self.listener: asyncio.Task | None = None
        self.listening = asyncio.Event()  # set once new events will be heard
        # The newest event id the listener has read: where it resumes after a failure.
        # None until a listener starts, which hears only what comes after it.
        self.position: int | None = None

    def join(self, client: Client) -> None:
        self.clients.add(client)
        if self.listener is None or self.listener.done():
            self.listener = asyncio.get_running_loop().create_task(self._listen())

    def leave(self, client: Client) -> None:
        self.clients.discard(client)

    def streams_of(self, user_id: int) -> int:
        """How many streams ``user_id`` holds open here (this event loop, so this process).

        A client whose answer never started streaming (its caller went away between
        the answer and its first byte) is forgotten after ``STARTING_SECONDS``.
        """
        now = time.monotonic()
        for client in list(self.clients):
            if client.task is None and now - client.joined_at > STARTING_SECONDS:
                self.clients.discard(client)
        return sum(1 for c in self.clients if c.user_id == user_id and not c.dropped)

    def publish(self, items) -> None:
        for event_id, project_id, payload in items:
            for client in list(self.clients):
                if client.dropped:  # also one whose answer never started streaming
                    self.clients.discard(client)
                elif client.wants(project_id, payload):
                    client.offer((event_id, project_id, payload))

    async def _listen(self) -> None:
        self.position = None  # a new listener: from now on; a retry resumes where it was
        while self.clients:
            self.listening.clear()
            try:
                # Behind a pooler in transaction mode a LISTEN stays on whichever server
                # connection ran it, and no notification comes back: poll there too.
                if connection.vendor == "postgresql" and settings.DATABASE_POOL_MODE == "session":
                    await self._listen_postgres()
                else:
                    await self._poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database went away: wait, then listen again
                log.warning("the live stream's listener failed; retrying", exc_info=True)
                await asyncio.sleep(1)

    async def _catch_up(self) -> None:
        """On (re)connecting: note where the event table ends, or, after a failure,
        offer what was written meanwhile."""
        if self.position is None:
            self.position = await _closing(newest_id)()
        else:
            await self._read_new()

    async def _read_new(self) -> None:
        items, self.position = await _closing(read_new)(self.position)
        self.publish(items)

    async def _poll(self) -> None:
        await self._catch_up()
        self.listening.set()
        while self.clients:
            await asyncio.sleep(POLL_SECONDS)
            await self._read_new()

    async def _listen_postgres(self) -> None:
        params = connections["default"].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as listen:
            await listen.execute(f"LISTEN {STREAM_CHANNEL}")
            await self._catch_up()
            self.listening.set()
            while self.clients:
                ids = []
                async for note in listen.notifies(timeout=POLL_SECONDS, stop_after=1):
                    ids.append(int(note.payload))
                # Then whatever else has arrived, without waiting out the window: each
                # event goes out as soon as it is heard, in batches only under load.
                async for note in listen.notifies(timeout=0.005):
                    ids.append(int(note.payload))
                    if len(ids) >= 500:
                        break
                if ids:
                    self.publish(await _closing(read_by_ids)(sorted(set(ids))))
                    self.position = max(self.position, *ids)


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub]" = weakref.WeakKeyDictionary()


def hub() -> Hub:
    """The running event loop's hub (asyncio queues and tasks belong to one loop)."""
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = Hub()
    return _hubs[loop]
