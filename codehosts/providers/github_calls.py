"""How each call to GitHub is made (``codehosts.providers.github``): installation tokens
kept in this process's memory only, and githubkit's retry decision (rate limits waited out
up to a bound, reads retried on a 5xx or a timeout, writes never)."""

import logging
import time
from datetime import timedelta

import httpx
from githubkit.cache import BaseCache, BaseCacheStrategy
from githubkit.exception import (
    GitHubException,
    RateLimitExceeded,
    RequestError,
    RequestFailed,
    RequestTimeout,
)
from githubkit.retry import RetryOption

# The provider's own logger: a retry is said where the call was made.
logger = logging.getLogger("codehosts.providers.github")
RETRIED_METHODS = {"GET", "HEAD"}


class TokenCache(BaseCache, BaseCacheStrategy):
    """Installation tokens and App JWTs in this process's memory only (never Redis or the
    database: a token is a secret), one cache per API base, and forgettable when the host
    stops taking a token before its time."""

    def __init__(self):
        self._items: dict[str, tuple[str, float]] = {}

    def get(self, key: str) -> str | None:
        value, until = self._items.get(key, (None, 0.0))
        return value if value is not None and until > time.monotonic() else None

    def set(self, key: str, value: str, ex: timedelta) -> None:
        self._items[key] = (value, time.monotonic() + ex.total_seconds())

    def forget_installation_tokens(self) -> None:
        self._items = {k: v for k, v in self._items.items() if ":installation:" not in k}

    def get_cache_storage(self) -> "TokenCache":
        return self

    def get_async_cache_storage(self):
        raise NotImplementedError("the provider is synchronous")

    def get_hishel_storage(self):
        raise NotImplementedError("HTTP caching is off")

    def get_async_hishel_storage(self):
        raise NotImplementedError("HTTP caching is off")


_caches: dict[str, TokenCache] = {}


def token_cache(api_url: str) -> TokenCache:
    return _caches.setdefault(api_url, TokenCache())


def unwrapped(exc: Exception) -> Exception:
    """The host's own refusal inside githubkit's wrapper: minting an installation token
    happens inside httpx's auth flow, whose failures come out as a ``RequestError``."""
    while isinstance(exc, RequestError) and isinstance(exc.exc, GitHubException):
        exc = exc.exc
    return exc


class Retry:
    """githubkit's retry decision: a rate limit waited out when the host asks for no more
    than ``max_wait`` seconds, a 5xx or a timeout of a read retried with backoff."""

    def __init__(self, *, retries: int, max_wait: float, backoff: float, sleep):
        self.retries, self.max_wait, self.backoff, self.sleep = retries, max_wait, backoff, sleep

    def __call__(self, exc: GitHubException, count: int) -> RetryOption:
        exc = unwrapped(exc)
        if count >= self.retries:
            return RetryOption(False)
        if isinstance(exc, RateLimitExceeded):
            wait = exc.retry_after.total_seconds()
            if wait > self.max_wait:
                return RetryOption(False)
            return self._again(exc.request, f"asked to wait ({exc.response.status_code})", wait)
        request = getattr(exc, "request", None)
        if request is None or request.method not in RETRIED_METHODS:
            return RetryOption(False)
        if isinstance(exc, RequestTimeout):
            return self._again(request, "timed out", self.backoff * 2**count)
        if isinstance(exc, RequestFailed) and exc.response.status_code >= 500:
            return self._again(
                request, f"answered {exc.response.status_code}", self.backoff * 2**count
            )
        return RetryOption(False)

    def _again(self, request: httpx.Request, why: str, wait: float) -> RetryOption:
        logger.warning(
            "the code host %s for %s %s; trying again in %.1f s",
            why,
            request.method,
            request.url.path,
            wait,
        )
        self.sleep(wait)
        # githubkit sleeps what it is told and reads zero as "a minute": the wait is ours.
        return RetryOption(True, timedelta(microseconds=1))
