"""A small client for the agent API (``/api/v1/``), one method per call.

It reads ``FACTORY_URL`` and ``FACTORY_TOKEN`` from the environment unless given.
Refusals raise ``FactoryError`` carrying the API's status, ``code`` and ``detail``.
Reads and submits (which carry an ``Idempotency-Key``) are retried when the server
is briefly unavailable (503 or a dropped connection); nothing else is retried.
``keep_lease`` heartbeats an attempt from a background thread while the agent works.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


class FactoryError(Exception):
    """The API refused (4xx/5xx) or could not be reached."""

    def __init__(self, status: int, code: str, detail: str, body: dict | None = None):
        super().__init__(f"{code}: {detail}")
        self.status, self.code, self.detail, self.body = status, code, detail, body or {}


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

    def heartbeat(self, attempt: int, lease_seconds: int | None = None) -> dict:
        body = {} if lease_seconds is None else {"lease_seconds": lease_seconds}
        return self._json("POST", f"/attempts/{attempt}/heartbeat/", json=body)

    def keep_lease(self, attempt: int, lease_seconds: int) -> LeaseKeeper:
        """``with client.keep_lease(attempt, 300) as lease:`` heartbeats every third of
        the lease until the block ends; ``lease.lost`` tells when the lease is gone."""
        return LeaseKeeper(self, attempt, lease_seconds)

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
        never read into memory whole."""
        if isinstance(file, str | Path):
            with Path(file).open("rb") as handle:
                return self.evidence(attempt, handle, kind, criteria, name or Path(file).name)
        data = {"kind": kind}
        if criteria:
            data["criteria"] = ",".join(criteria)
        return self._json(
            "POST",
            f"/attempts/{attempt}/evidence/",
            data=data,
            files={"file": (name or kind, file, "application/octet-stream")},
        )

    def decide(self, attempt: int, title: str, context: str, decision: str, **fields) -> dict:
        body = {"title": title, "context": context, "decision": decision, **fields}
        return self._json("POST", f"/attempts/{attempt}/decisions/", json=body)

    def submit(
        self,
        attempt: int,
        summary: str,
        change: dict | None = None,
        idempotency_key: str | None = None,
    ) -> dict:
        """Submit; safe to retry: the same Idempotency-Key is sent on every try."""
        key = idempotency_key or str(uuid.uuid4())
        return self._json(
            "POST",
            f"/attempts/{attempt}/submit/",
            json={"summary": summary, "change": change or {}},
            headers={"Idempotency-Key": key},
            retry=True,
        )

    def release(self, attempt: int, reason: str = "", blocked: bool = False) -> dict:
        return self._json(
            "POST", f"/attempts/{attempt}/release/", json={"reason": reason, "blocked": blocked}
        )

    def review(self, key: str, verdict: str, reason: str = "") -> dict:
        return self._json(
            "POST", f"/tasks/{key}/review/", json={"verdict": verdict, "reason": reason}
        )

    def tasks(self, **filters) -> list[dict]:
        return self._pages("/tasks/", {k: v for k, v in filters.items() if v})

    def task(self, key: str) -> dict:
        return self._json("GET", f"/tasks/{key}/", retry=True)

    def attempt(self, attempt: int) -> dict:
        return self._json("GET", f"/attempts/{attempt}/", retry=True)

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

    def project(self, slug: str) -> dict:
        """A project: its repository, default branch, verify block and gate policy."""
        return self._json("GET", f"/projects/{slug}/", retry=True)

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
    task now) ends the keeping and is kept in ``lost``: stop working on the attempt,
    since nothing more it writes will be accepted.
    """

    def __init__(self, client: FactoryClient, attempt: int, lease_seconds: int):
        self.client, self.attempt, self.lease_seconds = client, attempt, lease_seconds
        self.lost: FactoryError | None = None
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{attempt}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                self.client.heartbeat(self.attempt, self.lease_seconds)
            except FactoryError as exc:
                if exc.status == 0 or exc.status >= 500:
                    continue
                self.lost = exc
                return
            self.beats += 1

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _error(response: httpx.Response) -> FactoryError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    code = body.get("code") or f"http_{response.status_code}"
    detail = body.get("detail") or response.reason_phrase
    return FactoryError(response.status_code, code, detail, body)
