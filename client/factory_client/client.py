"""A small client for the agent API (``/api/v1/``), one method per call.

It reads ``FACTORY_URL`` and ``FACTORY_TOKEN`` from the environment unless given.
Refusals raise ``FactoryError`` carrying the API's status, ``code`` and ``detail``.
Reads and submits (which carry an ``Idempotency-Key``) are retried when the server
is briefly unavailable (503 or a dropped connection); nothing else is retried.
``keep_lease`` heartbeats an attempt from a background thread while the agent works.
``events`` follows the live stream (Server-Sent Events), and ``wait_for_task`` waits on
it for a task to reach a state, polling instead where the site serves no stream.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from factory_client import files

DEFAULT_URL = "http://127.0.0.1:8000"
log = logging.getLogger("factory_client")

# The server sends a heartbeat comment every FACTORY_STREAM_HEARTBEAT seconds (15 by
# default): a stream silent for this long has been dropped on the way.
STREAM_READ_TIMEOUT = 60.0
STREAM_RECONNECTS = 5  # failed connections in a row before giving up
TASK_STATES = (
    "draft",
    "ready",
    "claimed",
    "checking",
    "in_review",
    "approved",
    "done",
    "blocked",
    "failed",
    "cancelled",
)
# What ``wait_for_task`` follows: the task's own events, and its attempts' (a submit, a
# failed gate or an expired lease moves the task without a task event of its own).
WAIT_TYPES = ("task.*", "attempt.*", "lease.expired")
WAIT_POLL_SECONDS = 2.0
# Some moves have no event at all (a release, an unblock, a reopen): the state is read
# again at least this often while waiting on the stream.
WAIT_RECHECK_SECONDS = 15.0


class FactoryError(Exception):
    """The API refused (4xx/5xx) or could not be reached."""

    def __init__(self, status: int, code: str, detail: str, body: dict | None = None):
        super().__init__(f"{code}: {detail}")
        self.status, self.code, self.detail, self.body = status, code, detail, body or {}


class WaitTimeout(FactoryError):
    """``wait_for_task`` gave up: the task did not reach the states in time.

    ``task`` is the task as last read (None if it never was)."""

    def __init__(self, key: str, until: list[str], timeout: float, task: dict | None):
        state = task["state"] if task else "unknown"
        detail = f"{key} did not reach {' or '.join(until)} within {timeout:g} s (it is {state})"
        body = {"code": "timeout", "detail": detail, "key": key, "state": state}
        super().__init__(0, "timeout", detail, body)
        self.task = task


class FactoryClient:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ):
        self.url = (url or os.environ.get("FACTORY_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("FACTORY_TOKEN")
        if not token:
            raise FactoryError(0, "no_token", "set FACTORY_TOKEN or pass --token")
        self.retries = retries
        # The lease keepers running for this client, by attempt: a submit or a release
        # stops its attempt's keeper first (``LeaseKeeper.stop``).
        self._keepers: dict[int, LeaseKeeper] = {}
        self.http = httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> FactoryClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------

    def _request(self, method: str, path: str, *, retry: bool = False, **kwargs) -> httpx.Response:
        attempts = self.retries + 1 if retry else 1
        for attempt in range(attempts):
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if attempt + 1 < attempts:
                    time.sleep(min(2**attempt, 10))
                    continue
                raise FactoryError(0, "unreachable", f"{self.url}: {exc}") from exc
            except httpx.HTTPError as exc:  # a body it cannot decode, say: no API answered
                raise FactoryError(0, "bad_response", f"{self.url}: {exc}") from exc
            if response.status_code == 503 and attempt + 1 < attempts:
                time.sleep(float(response.headers.get("Retry-After", 1)))
                continue
            if response.status_code >= 400:
                raise _error(response)
            return response
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, **kwargs) -> Any:
        response = self._request(method, path, **kwargs)
        if response.status_code == 204:
            return None
        try:
            return response.json()
        except ValueError:
            # Status 0, as when unreachable: what answered is not the API.
            raise FactoryError(
                0,
                "bad_response",
                f"{self.url} answered {response.status_code} without JSON: is it Factory Memory?",
            ) from None

    # --- the calls ----------------------------------------------------------------------

    def claim(
        self, project: str | None = None, labels=(), lease_seconds: int | None = None
    ) -> dict | None:
        """Claim the best claimable task; None when there is none."""
        body: dict[str, Any] = {"labels": list(labels)}
        if project:
            body["project"] = project
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return self._json("POST", "/tasks/claim/", json=body)

    def context(self, key: str, max_chars: int | None = None) -> dict:
        params = {"max_chars": max_chars} if max_chars else {}
        return self._json("GET", f"/tasks/{key}/context/", params=params, retry=True)

    def brief(self, key: str, max_chars: int | None = None) -> str:
        """The context bundle as a Markdown brief; ``max_chars`` bounds the Markdown."""
        params = {"max_chars": max_chars} if max_chars else {}
        response = self._request(
            "GET",
            f"/tasks/{key}/context/",
            params=params,
            headers={"Accept": "text/markdown"},
            retry=True,
        )
        if not response.headers.get("Content-Type", "").startswith("text/markdown"):
            raise FactoryError(
                0,
                "bad_response",
                f"{self.url} answered {response.status_code} without Markdown: "
                "is it Factory Memory?",
            )
        return response.text

    def heartbeat(
        self, attempt: int, lease_seconds: int | None = None, usage: dict | None = None
    ) -> dict:
        """Extend the lease; ``usage`` is what was used since the last report (an
        increment: ``{model, input_tokens, output_tokens, cost_usd, wall_seconds}``)."""
        body = {} if lease_seconds is None else {"lease_seconds": lease_seconds}
        if usage:
            body["usage"] = usage
        return self._json("POST", f"/attempts/{attempt}/heartbeat/", json=body)

    def keep_lease(self, attempt: int, lease_seconds: int, usage=None) -> LeaseKeeper:
        """``with client.keep_lease(attempt, 300) as lease:`` heartbeats every third of
        the lease until the block ends; ``lease.lost`` tells when the lease is gone.
        ``usage``, if given, has ``pending()`` (the increment to send, or None) and
        ``sent(increment)`` (called once the server took it)."""
        return LeaseKeeper(self, attempt, lease_seconds, usage)

    def _stop_keeping(self, attempt: int) -> None:
        """Stop the lease keeper of ``attempt``, if one runs, before the lease is given up:
        a heartbeat that reached the server after the submit would be refused (the
        attempt no longer runs) and read as a lost lease."""
        keeper = self._keepers.get(attempt)
        if keeper is not None:
            keeper.stop()

    def checkpoint(self, attempt: int) -> dict:
        return self._json("GET", f"/attempts/{attempt}/checkpoint/", retry=True)

    def save_checkpoint(self, attempt: int, data: Any, revision: int) -> dict:
        return self._json(
            "PUT", f"/attempts/{attempt}/checkpoint/", json={"data": data, "revision": revision}
        )

    def evidence(
        self, attempt: int, file: str | Path | BinaryIO, kind: str, criteria=(), name: str = ""
    ) -> dict:
        """Upload a file (a path, or an open binary file with ``name``); it is streamed,
        never read into memory whole. A path must name a regular file, not a link to one
        (a repository's committed ``junit.xml -> ~/.ssh/id_rsa`` is not sent): refused
        with ``invalid`` before anything is sent."""
        if isinstance(file, str | Path):
            path = Path(file)
            try:
                handle = files.open_read(path.parent, path.name)
            except files.UnsafePath as exc:
                raise FactoryError(400, "invalid", exc.naming(str(path))) from None
            except OSError as exc:
                raise FactoryError(400, "invalid", f"{path}: {exc.strerror}") from None
            with handle:
                return self.evidence(attempt, handle, kind, criteria, name or path.name)
        data = {"kind": kind}
        if criteria:
            data["criteria"] = ",".join(criteria)
        return self._json(
            "POST",
            f"/attempts/{attempt}/evidence/",
            data=data,
            files={"file": (name or kind, file, "application/octet-stream")},
        )

    def import_files(
        self,
        project: str,
        format: str,
        data: bytes,
        name: str,
        apply: bool = False,
        mapping: str | None = None,
        origin_name: str | None = None,
    ) -> dict:
        """Upload a zipped folder or a JSONL file to import; a dry run unless ``apply``.
        ``mapping``: spec-kit criterion proofs, as JSON text. ``origin_name``: the name its
        records' origins carry (the server's default: ``name`` less its extension)."""
        fields = {"format": format, "dry_run": "false" if apply else "true"}
        if mapping:
            fields["mapping"] = mapping
        if origin_name is not None:
            fields["origin_name"] = origin_name
        return self._json(
            "POST",
            f"/projects/{project}/imports/",
            data=fields,
            files={"file": (name, data, "application/octet-stream")},
        )

    def export(self, project: str, format: str, spec: str | None = None) -> tuple[str, bytes]:
        """A project's records in ``format``: (the file name the site suggests, its bytes)."""
        params = {"spec": spec} if spec else {}
        response = self._request(
            "GET", f"/projects/{project}/exports/{format}/", params=params, retry=True
        )
        disposition = response.headers.get("content-disposition", "")
        name = disposition.partition('filename="')[2].rstrip('"') or f"export.{format}"
        return name, response.content

    def decide(self, attempt: int, title: str, context: str, decision: str, **fields) -> dict:
        body = {"title": title, "context": context, "decision": decision, **fields}
        return self._json("POST", f"/attempts/{attempt}/decisions/", json=body)

    def submit(
        self,
        attempt: int,
        summary: str,
        change: dict | None = None,
        idempotency_key: str | None = None,
        usage: dict | None = None,
    ) -> dict:
        """Submit; safe to retry: the same Idempotency-Key is sent on every try (and
        the server adds ``usage``, the increment since the last heartbeat, once)."""
        self._stop_keeping(attempt)
        key = idempotency_key or str(uuid.uuid4())
        body = {"summary": summary, "change": change or {}}
        if usage:
            body["usage"] = usage
        return self._json(
            "POST",
            f"/attempts/{attempt}/submit/",
            json=body,
            headers={"Idempotency-Key": key},
            retry=True,
        )

    def release(self, attempt: int, reason: str = "", blocked: bool = False) -> dict:
        self._stop_keeping(attempt)
        return self._json(
            "POST", f"/attempts/{attempt}/release/", json={"reason": reason, "blocked": blocked}
        )

    def review(
        self, key: str, verdict: str, reason: str = "", criteria: list[dict] | None = None
    ) -> dict:
        body = {"verdict": verdict, "reason": reason}
        if criteria:
            body["criteria"] = criteria
        return self._json("POST", f"/tasks/{key}/review/", json=body)

    def tasks(self, **filters) -> list[dict]:
        return self._pages("/tasks/", {k: v for k, v in filters.items() if v})

    def task(self, key: str) -> dict:
        return self._json("GET", f"/tasks/{key}/", retry=True)

    def attempt(self, attempt: int) -> dict:
        return self._json("GET", f"/attempts/{attempt}/", retry=True)

    def void_usage(self, attempt: int, reason: str) -> dict:
        """Void the usage the attempt has reported so far (managers): kept on the attempt,
        counted toward no budget from now on. Answers the attempt."""
        return self._json("POST", f"/attempts/{attempt}/usage/void/", json={"reason": reason})

    def handoff(self, key: str) -> dict:
        return self._json("GET", f"/tasks/{key}/handoff/", retry=True)

    def decisions(
        self,
        q: str | None = None,
        state: str | None = None,
        project: str | None = None,
        limit: int = 1000,
    ) -> list[dict]:
        """Decision records, best match first with ``q``, else newest first."""
        return self._pages(
            "/decisions/",
            {k: v for k, v in {"q": q, "state": state, "project": project}.items() if v},
            limit=limit,
        )

    def decision(self, key: str) -> dict:
        return self._json("GET", f"/decisions/{key}/", retry=True)

    def landing(self, project: str) -> dict:
        """A project's landing queue: its setting, the queued changes in order, recent
        batches and how many changes landed in the last hour (docs/landing.md)."""
        return self._json("GET", f"/projects/{project}/landing/", retry=True)

    def pause_landing(self, project: str, reason: str, until: str | None = None) -> dict:
        """Pause a project's landing (managers): approvals queue, nothing lands until a resume
        or ``until`` (ISO 8601). Answers the landing queue, as ``landing`` does."""
        return self._json(
            "POST", f"/projects/{project}/landing/pause/", json={"reason": reason, "until": until}
        )

    def fast_lane(self, project: str, key: str, reason: str, *, alone: bool = False) -> dict:
        """Put a queued task at the head of the landing queue (managers): it lands next,
        verified like every change; ``alone`` lands it in a batch by itself."""
        return self._json(
            "POST",
            f"/projects/{project}/landing/{key}/fast/",
            json={"reason": reason, "alone": alone},
        )

    def revert(self, key: str, reason: str) -> dict:
        """Queue the revert of a task's landed change (managers): the lander lands it like
        any change, and the task reopens with the reason. Answers the task."""
        return self._json("POST", f"/tasks/{key}/revert/", json={"reason": reason})

    def cancel_revert(self, key: str, reason: str) -> dict:
        """Take back a task's queued revert (managers): the lander will not land it, and the
        task stays done at its landed commit. Answers the task."""
        return self._json("POST", f"/tasks/{key}/revert/cancel/", json={"reason": reason})

    def resume_landing(self, project: str, reason: str = "") -> dict:
        """Lift a project's pause (managers): the lander lands what queued meanwhile."""
        return self._json("POST", f"/projects/{project}/landing/resume/", json={"reason": reason})

    def dequeue(self, project: str, key: str, to: str, reason: str) -> dict:
        """Take a queued task out of the landing queue (managers): to in_review or ready."""
        return self._json(
            "POST", f"/projects/{project}/landing/{key}/dequeue/", json={"to": to, "reason": reason}
        )

    def project(self, slug: str) -> dict:
        """A project: its repository, default branch, verify block and gate policy."""
        return self._json("GET", f"/projects/{slug}/", retry=True)

    # --- the live stream ------------------------------------------------------------------

    def events(
        self,
        project: str | None = None,
        types=None,
        last_event_id: int | str | None = None,
        *,
        read_timeout: float = STREAM_READ_TIMEOUT,
        reconnects: int = STREAM_RECONNECTS,
    ) -> Iterator[dict]:
        """The live stream's events as they happen: ``{"id", "type", "payload"}`` each,
        ``payload`` being the event's JSON (``{"id", "type", "time", "actor", "project",
        "data"}``).

        ``project`` (a slug) and ``types`` (names, ``task.*`` for a family) narrow it;
        ``last_event_id`` resumes after that event. A dropped or silent connection is
        opened again with ``Last-Event-ID`` after a pause (the server's ``retry``,
        doubling while connecting fails); after ``reconnects`` failed reconnections in a
        row it raises ``unreachable``. A refusal raises ``FactoryError`` (501 ``stream_needs_asgi``
        where the site is served through WSGI). The generator never ends by itself.
        """
        for kind, value in self._stream(
            project, types, last_event_id, read_timeout=read_timeout, reconnects=reconnects
        ):
            if kind == "event":
                yield value

    def _stream(
        self,
        project,
        types,
        last_event_id=None,
        *,
        read_timeout: float = STREAM_READ_TIMEOUT,
        reconnects: int = STREAM_RECONNECTS,
        stop: threading.Event | None = None,
    ) -> Iterator[tuple[str, Any]]:
        """``("open", None)`` each time a connection is listening, then ``("event", {…})``
        for each event and ``("comment", text)`` for each comment (the heartbeats)."""
        params = {}
        if project:
            params["project"] = project
        if types:
            params["types"] = types if isinstance(types, str) else ",".join(types)
        last = str(last_event_id) if last_event_id is not None else None
        timeout = httpx.Timeout(10.0, read=read_timeout)
        failures, pause = 0, 1.0
        while stop is None or not stop.is_set():
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = last
            opened = False
            try:
                with self.http.stream(
                    "GET", "/events/stream", params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code in (502, 503, 504):  # a proxy, or a restart
                        reason = f"it answered {response.status_code}"
                    else:
                        _check_stream(self.url, response)
                        for item in _sse(response.iter_lines()):
                            if not opened:
                                # The server's first line comes once it listens for new
                                # events: nothing that happens from here on is missed.
                                opened, failures = True, 0
                                yield "open", None
                            if item[0] == "retry":
                                pause = item[1]
                                continue
                            if item[0] == "event" and item[1]["id"] is not None:
                                last = str(item[1]["id"])
                            yield item
                            if stop is not None and stop.is_set():
                                return
                        reason = "the stream ended"
            except httpx.TransportError as exc:  # refused, dropped, or silent too long
                reason = str(exc) or type(exc).__name__
            except httpx.HTTPError as exc:
                raise FactoryError(0, "bad_response", f"{self.url}: {exc}") from exc
            if stop is not None and stop.is_set():
                return
            if not opened:
                failures += 1
            if failures > reconnects:
                raise FactoryError(0, "unreachable", f"{self.url}: {reason}")
            log.info("the event stream was interrupted (%s); reconnecting", reason)
            time.sleep(min(pause * 2 ** max(failures - 1, 0), 30.0))

    def wait_for_task(self, key: str, until, timeout: float) -> dict:
        """Wait until task ``key`` is in one of the states ``until``; return the task.

        The stream is opened first and the task read once it listens, so a move between
        the two is not missed; then the stream is followed (the task is read again at
        each reconnection, at each event of its attempts, and every
        ``WAIT_RECHECK_SECONDS``). Where the site serves no stream (501
        ``stream_needs_asgi``: a WSGI server), or the stream fails, the task is read
        every ``WAIT_POLL_SECONDS`` instead. Raises ``WaitTimeout`` (code ``timeout``)
        after ``timeout`` seconds, and ``FactoryError`` on a refusal (``not_found``).
        """
        wanted = [until] if isinstance(until, str) else list(until)
        unknown = [state for state in wanted if state not in TASK_STATES]
        if not wanted or unknown:
            raise FactoryError(
                0,
                "invalid",
                f"unknown task states {', '.join(unknown) or '(none given)'}: "
                f"choose from {', '.join(TASK_STATES)}",
            )
        deadline = time.monotonic() + timeout
        follower = _Follower(self, key.split("-")[0], WAIT_TYPES)
        task = None
        try:
            recheck = None
            while True:
                remaining = deadline - time.monotonic()
                if recheck is not None:
                    remaining = min(remaining, recheck - time.monotonic())
                item = follower.next(remaining)
                if item is None:  # the deadline, or time to read the task again
                    task = self.task(key)
                    if task["state"] in wanted:
                        return task
                    if time.monotonic() >= deadline:
                        raise WaitTimeout(key, wanted, timeout, task)
                    recheck = time.monotonic() + WAIT_RECHECK_SECONDS
                    continue
                kind, value = item
                if kind == "error":
                    if 400 <= value.status < 500:  # not_found, a bad token
                        raise value
                    log.info("%s; polling %s every %g s instead", value, key, WAIT_POLL_SECONDS)
                    return self._poll_task(key, wanted, deadline, timeout)
                if kind == "open" or (kind == "event" and _moves(value, key, wanted)):
                    task = self.task(key)
                    if task["state"] in wanted:
                        return task
                    recheck = time.monotonic() + WAIT_RECHECK_SECONDS
        finally:
            follower.stop()

    def _poll_task(self, key: str, wanted: list[str], deadline: float, timeout: float) -> dict:
        while True:
            task = self.task(key)
            if task["state"] in wanted:
                return task
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(key, wanted, timeout, task)
            time.sleep(min(WAIT_POLL_SECONDS, remaining))

    def _pages(self, path: str, params: dict, limit: int = 1000) -> list[dict]:
        results, url = [], path
        params = {**params, "page_size": min(limit, 200)}
        while url and len(results) < limit:
            page = self._json("GET", url, params=params, retry=True)
            results.extend(page["results"])
            url, params = page.get("next"), None
            if url:
                url = url.split("/api/v1", 1)[-1]
        return results[:limit]


class LeaseKeeper:
    """Heartbeats one attempt every third of its lease, from a thread, until closed.

    A server that is briefly unreachable or unavailable is tried again at the next
    beat. A refusal (``409 lease_lost``: the lease ran out, or another agent holds the
    task now; ``409 budget_exhausted``: the usage reported reached the task's budget)
    ends the keeping and is kept in ``lost``: stop working on the attempt, since nothing
    more it writes will be accepted. A usage report the site refuses (400: one report above
    its bound) is not a lost lease: the beat is sent again without it, and the refusal is
    kept in ``usage_refused``.
    """

    def __init__(self, client: FactoryClient, attempt: int, lease_seconds: int, usage=None):
        self.client, self.attempt, self.lease_seconds = client, attempt, lease_seconds
        self.usage = usage
        self.lost: FactoryError | None = None
        self.usage_refused: FactoryError | None = None
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{attempt}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            increment = self.usage.pending() if self.usage is not None else None
            try:
                self._beat(increment)
            except FactoryError as exc:
                if exc.status == 0 or exc.status >= 500:
                    continue  # not taken (or not known to be): sent again with the next
                self.lost = exc
                return
            self.beats += 1

    def _beat(self, increment) -> None:
        try:
            self.client.heartbeat(self.attempt, self.lease_seconds, usage=increment)
        except FactoryError as exc:
            if not (exc.status == 400 and increment):
                raise
            # The site refused the usage (one report above its bound), not the lease, and
            # changed nothing: renew without it. The refused increment is given up, as the
            # site said, and kept in ``usage_refused`` to be shown.
            self.usage_refused = exc
            self.usage.sent(increment)
            self.client.heartbeat(self.attempt, self.lease_seconds)
            return
        if increment:
            self.usage.sent(increment)

    def stop(self) -> None:
        """No more heartbeats: the one being sent, if any, is answered first."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        if self.client._keepers.get(self.attempt) is self:
            del self.client._keepers[self.attempt]

    def __enter__(self) -> LeaseKeeper:
        self.client._keepers[self.attempt] = self
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _Follower:
    """Reads the stream in a thread, so the reader can wait on it with a deadline.

    The thread ends at the next line after ``stop`` (a heartbeat at the latest)."""

    def __init__(self, client: FactoryClient, project: str, types):
        self.items: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._stream = client._stream(project, types, stop=self._stop)
        self._thread = threading.Thread(target=self._run, name="factory-stream", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self._stream:
                self.items.put(item)
        except FactoryError as exc:
            self.items.put(("error", exc))
        except Exception as exc:  # whatever it is, the reader falls back to polling
            self.items.put(("error", FactoryError(0, "stream_failed", repr(exc))))

    def next(self, seconds: float) -> tuple[str, Any] | None:
        """The next item, or None after ``seconds``."""
        try:
            return self.items.get(timeout=max(seconds, 0))
        except queue.Empty:
            return None

    def stop(self) -> None:
        self._stop.set()


def _check_stream(url: str, response: httpx.Response) -> None:
    """Raise the refusal (``stream_needs_asgi`` under WSGI), or if this is no stream."""
    if response.status_code >= 400:
        response.read()
        raise _error(response)
    if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
        raise FactoryError(
            0,
            "bad_response",
            f"{url} answered {response.status_code} without an event stream: is it Factory Memory?",
        )


def _moves(event: dict, key: str, wanted: list[str]) -> bool:
    """Whether a stream event may have brought task ``key`` into a ``wanted`` state."""
    payload = event["payload"] if isinstance(event["payload"], dict) else {}
    data = payload.get("data") or {}
    if data.get("key") != key:
        return False
    if event["type"].startswith("task."):
        return data.get("to_state") in wanted
    return True  # an attempt's event: its to_state is the attempt's; read the task's


def _sse(lines) -> Iterator[tuple[str, Any]]:
    """Server-Sent Events from lines: ``("event", {"id", "type", "payload"})``,
    ``("comment", text)`` and ``("retry", seconds)``."""
    fields: dict[str, Any] = {"data": []}
    for line in lines:
        if line == "":
            if fields["data"]:
                data = "\n".join(fields["data"])
                try:
                    payload = json.loads(data)
                except ValueError:
                    payload = data
                event_id = fields.get("id")
                yield (
                    "event",
                    {
                        "id": int(event_id) if event_id and event_id.isdigit() else event_id,
                        "type": fields.get("event") or "message",
                        "payload": payload,
                    },
                )
            fields = {"data": []}
            continue
        if line.startswith(":"):
            yield "comment", line[1:].strip()
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            fields["data"].append(value)
        elif name in ("id", "event"):
            fields[name] = value
        elif name == "retry" and value.isdigit():
            yield "retry", int(value) / 1000


def _error(response: httpx.Response) -> FactoryError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    code = body.get("code") or f"http_{response.status_code}"
    detail = body.get("detail") or response.reason_phrase
    return FactoryError(response.status_code, code, detail, body)
