"""What an attempt used, for ``factory work`` to report: ``UsageMeter``."""

from __future__ import annotations

import json
import re
import threading
import time
from decimal import ROUND_DOWN, Decimal, InvalidOperation

from factory_client import files


class UsageMeter:
    """What the attempt used, as increments for the server (which adds each once).

    The agent may keep its running totals for the attempt in ``.factory/usage.json``
    (``{"model": "…", "input_tokens": 0, "output_tokens": 0, "cost_usd": "0.00"}``,
    rewritten as they grow); ``pending`` is those totals less what was already reported,
    plus the wall time since the claim, which factory work measures itself (the file's
    ``wall_seconds`` is not read). A field that is missing, malformed or smaller than
    before adds nothing, so the server never refuses what is sent; a file that is not
    JSON yet (half-written) is read again at the next report.
    """

    TOKENS = ("input_tokens", "output_tokens")
    MAX_TOKENS = 10**12
    MAX_COST = Decimal(1_000_000)
    PLACES = Decimal("0.000001")

    def __init__(self, read, clock=time.monotonic):
        self.read, self.clock = read, clock  # read(): the file's bytes, or None
        self.started = clock()
        self.reported = {"input_tokens": 0, "output_tokens": 0, "cost_usd": Decimal(0)}
        self.wall = 0.0
        self.model = None
        self.lock = threading.Lock()  # the lease's thread and the loop both report

    def totals(self) -> dict:
        """The agent's totals, each field only if it is well formed."""
        try:
            content = self.read()
            data = json.loads(content) if content is not None else {}
        except (OSError, ValueError, files.UnsafePath):
            data = {}
        if not isinstance(data, dict):
            return {}
        found = {}
        model = data.get("model")
        model = model.strip() if isinstance(model, str) else ""
        if model and len(data["model"]) <= 100 and _storable(model):
            found["model"] = model
        for name in self.TOKENS:
            value = data.get(name)
            if type(value) is int and 0 <= value <= self.MAX_TOKENS:
                found[name] = value
        cost = _dollars(data.get("cost_usd"))
        if cost is not None and cost < self.MAX_COST:
            found["cost_usd"] = cost.quantize(self.PLACES, rounding=ROUND_DOWN)
        return found

    def pending(self) -> dict | None:
        """What to send now (None: nothing new)."""
        with self.lock:
            totals, increment = self.totals(), {}
            if totals.get("model") and totals["model"] != self.model:
                increment["model"] = totals["model"]
            for name in (*self.TOKENS, "cost_usd"):
                grown = totals.get(name, self.reported[name]) - self.reported[name]
                if grown > 0:
                    increment[name] = (
                        format(grown.normalize(), "f") if name == "cost_usd" else grown
                    )
            wall = round(self.clock() - self.started - self.wall, 3)
            if wall > 0:
                increment["wall_seconds"] = wall
            return increment or None

    def sent(self, increment: dict) -> None:
        """The server took ``increment``: count it as reported."""
        with self.lock:
            self.model = increment.get("model", self.model)
            for name in self.TOKENS:
                self.reported[name] += increment.get(name, 0)
            self.reported["cost_usd"] += Decimal(increment.get("cost_usd", 0))
            self.wall += increment.get("wall_seconds", 0.0)


def _storable(text: str) -> bool:
    """Text the server stores: no NUL, no lone surrogate (it would refuse the beat)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _dollars(value) -> Decimal | None:
    """A cost the agent wrote (digits as a string, or a number), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            amount = Decimal(repr(value))
        except InvalidOperation:
            return None
    elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,15}(\.[0-9]{1,20})?", value):
        amount = Decimal(value)
    else:
        return None
    return amount if amount.is_finite() and amount >= 0 else None


class StreamMeter:
    """What the attempt used, read from the agent CLI's own output (``streams.Parser``), as
    increments for the server: per model (``by_model``) what grew since the last report
    (input, output, cache-read and cache-write tokens, and the cost where the agent
    reported one), the sums at the top, the wall time since the claim, and ``model`` when
    the model changed. Usage the output gave no model for goes only into the sums (the
    server counts it for ``model``). What the server took is counted by ``sent``; a beat
    it refused is sent again with the next."""

    FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

    def __init__(self, parser, clock=time.monotonic):
        self.parser, self.clock = parser, clock
        self.started = clock()
        self.reported: dict[str, dict] = {}
        self.wall = 0.0
        self.model = None
        self.lock = threading.Lock()

    def _reported(self, model: str) -> dict:
        return self.reported.setdefault(
            model, {**dict.fromkeys(self.FIELDS, 0), "cost_usd": Decimal(0)}
        )

    def pending(self) -> dict | None:
        with self.lock:
            totals = self.parser.snapshot()
            increment, by_model, sums = {}, {}, dict.fromkeys(self.FIELDS, 0)
            cost = Decimal(0)
            for model, used in totals.models.items():
                before, grown = self._reported(model), {}
                for name in self.FIELDS:
                    delta = getattr(used, name) - before[name]
                    if delta > 0:
                        grown[name] = delta
                        sums[name] += delta
                if used.cost_usd is not None:
                    delta = used.cost_usd.quantize(UsageMeter.PLACES, rounding=ROUND_DOWN)
                    delta -= before["cost_usd"]
                    if delta > 0:
                        grown["cost_usd"] = format(delta.normalize(), "f")
                        cost += delta
                if grown and model:
                    by_model[model] = grown
            if totals.model and totals.model != self.model:
                increment["model"] = totals.model
            increment.update({name: value for name, value in sums.items() if value})
            if cost > 0:
                increment["cost_usd"] = format(cost.normalize(), "f")
            if by_model:
                increment["by_model"] = by_model
            wall = round(self.clock() - self.started - self.wall, 3)
            if wall > 0:
                increment["wall_seconds"] = wall
            return increment or None

    def sent(self, increment: dict) -> None:
        """The server took ``increment``: count it as reported."""
        with self.lock:
            self.model = increment.get("model", self.model)
            named = increment.get("by_model", {})
            for model, grown in named.items():
                before = self._reported(model)
                for name in self.FIELDS:
                    before[name] += grown.get(name, 0)
                before["cost_usd"] += Decimal(grown.get("cost_usd", 0))
            rest = self._reported("")
            for name in self.FIELDS:
                rest[name] += increment.get(name, 0) - sum(g.get(name, 0) for g in named.values())
            rest["cost_usd"] += Decimal(increment.get("cost_usd", 0)) - sum(
                (Decimal(g.get("cost_usd", 0)) for g in named.values()), Decimal(0)
            )
            self.wall += increment.get("wall_seconds", 0.0)

    def session_id(self) -> str | None:
        return self.parser.snapshot().session_id
