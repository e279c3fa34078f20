"""Usage read from an agent CLI's own output as it streams: one parser per preset.

``StreamReader`` copies the agent's output to its log and hands each line to the preset's
parser, with bounded memory whatever the agent prints: a line longer than ``MAX_LINE``
is skipped (never held whole), the log stops growing at ``MAX_LOG`` and parsing stops
after ``MAX_PARSED`` bytes (the output is still drained, so the agent never blocks).

Each parser keeps the run's **running totals** (``Totals``): per model, input (not
cached), output, cache-read and cache-write tokens and the cost the agent reported;
the turns; the session id. ``usage.UsageMeter`` sends what grew since the last report.
A value that is not a whole number of tokens from 0 to ``MAX_TOKENS``, or a cost that is
not a finite amount from 0 to ``MAX_COST``, refuses its whole event (counted in
``refused``): an agent cannot make its totals shrink, go negative or leap to absurdity.
What each CLI prints is documented beside its fixture (tests/fixtures/agents/).
"""

from __future__ import annotations

import abc
import json
import re
import threading
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

MAX_LINE = 1 << 20  # bytes; Claude Code's result line is a few kB
MAX_LOG = 32 << 20
MAX_PARSED = 256 << 20
MAX_TOKENS = 10**10  # per event: far above any context window
MAX_COST = Decimal(10_000)  # USD per event
MAX_MODEL = 100
SESSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")  # never a flag, never a path
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class Absurd(ValueError):
    """A value no agent reports honestly; the event that held it is refused."""


def tokens(value) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise Absurd(f"tokens {value!r}")
    return value


def dollars(value) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise Absurd(f"cost {value!r}")
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else str(value))
    except InvalidOperation:
        raise Absurd(f"cost {value!r}") from None
    if not amount.is_finite() or not 0 <= amount <= MAX_COST:
        raise Absurd(f"cost {value!r}")
    return amount


def model_name(value) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value or len(value) > MAX_MODEL or "\x00" in value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


@dataclass
class ModelTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: Decimal | None = None  # None: the agent reported no cost for this model

    def add(self, other: ModelTotals) -> None:
        for name in TOKEN_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or Decimal(0)) + other.cost_usd

    def raise_to(self, other: ModelTotals) -> None:
        """Totals that a CLI reports whole (a final result): never below what was seen."""
        for name in TOKEN_FIELDS:
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        if other.cost_usd is not None:
            self.cost_usd = max(self.cost_usd or Decimal(0), other.cost_usd)


@dataclass
class Totals:
    """The run's usage so far, as the agent's own output says it."""

    models: dict[str, ModelTotals] = field(default_factory=dict)  # "" : model not said
    turns: int = 0
    session_id: str | None = None
    model: str | None = None  # the last model named
    refused: list[str] = field(default_factory=list)

    def of(self, model: str | None) -> ModelTotals:
        return self.models.setdefault(model or "", ModelTotals())


class Parser(abc.ABC):
    """Reads one line at a time; ``totals`` is what it has read so far. Each preset's
    parser says how it reads a line (``read``)."""

    def __init__(self, model_hint: str | None = None):
        self.totals = Totals()
        self.hint = model_name(model_hint)
        if self.hint:
            self.totals.model = self.hint
        self.lock = threading.Lock()

    def feed(self, line: bytes) -> None:
        with self.lock:
            try:
                self.read(line)
            except Absurd as exc:
                self.totals.refused.append(str(exc)[:200])

    @abc.abstractmethod
    def read(self, line: bytes) -> None:
        """Take one line of the agent's output into ``totals``; ``Absurd`` refuses it."""

    def session(self, value) -> None:
        if isinstance(value, str) and SESSION.fullmatch(value):
            self.totals.session_id = value
        elif value is not None:
            self.totals.refused.append("session id not an id")

    def snapshot(self) -> Totals:
        """A copy of the totals, safe to read while lines keep coming."""
        with self.lock:
            t = self.totals
            return Totals(
                models={k: ModelTotals(**vars(v)) for k, v in t.models.items()},
                turns=t.turns,
                session_id=t.session_id,
                model=t.model,
                refused=list(t.refused),
            )


def _json(line: bytes):
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class ClaudeParser(Parser):
    """Claude Code ``-p --output-format stream-json --verbose``: ``system``/``init`` names the
    session and model; each ``assistant`` message carries its API call's ``usage`` (a
    message split over several events repeats it: counted once per message id); the
    ``result`` gives the whole run per model (``modelUsage``: tokens and ``costUSD``),
    ``num_turns`` and ``total_cost_usd``, which stand over the running count."""

    def __init__(self, model_hint=None):
        super().__init__(model_hint)
        self.seen: set[str] = set()

    def read(self, line):
        event = _json(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            self.session(event.get("session_id"))
            self.totals.model = model_name(event.get("model")) or self.totals.model
        elif kind == "assistant":
            message = event.get("message")
            if not isinstance(message, dict) or not isinstance(message.get("usage"), dict):
                return
            key = message.get("id")
            if isinstance(key, str):
                if key in self.seen:
                    return
                self.seen.add(key)
            usage = message["usage"]
            step = ModelTotals(
                input_tokens=tokens(usage.get("input_tokens")),
                output_tokens=tokens(usage.get("output_tokens")),
                cache_read_tokens=tokens(usage.get("cache_read_input_tokens")),
                cache_write_tokens=tokens(usage.get("cache_creation_input_tokens")),
            )
            model = model_name(message.get("model")) or self.totals.model
            self.totals.of(model).add(step)
            self.totals.model = model
        elif kind == "result":
            self.session(event.get("session_id"))
            per_model = event.get("modelUsage")
            if not isinstance(per_model, dict):
                return
            found = {}
            for name, usage in per_model.items():
                model = model_name(name)
                if model is None or not isinstance(usage, dict):
                    continue
                found[model] = ModelTotals(
                    input_tokens=tokens(usage.get("inputTokens")),
                    output_tokens=tokens(usage.get("outputTokens")),
                    cache_read_tokens=tokens(usage.get("cacheReadInputTokens")),
                    cache_write_tokens=tokens(usage.get("cacheCreationInputTokens")),
                    cost_usd=dollars(usage.get("costUSD", 0)),
                )
            turns = tokens(event.get("num_turns"))
            for model, whole in found.items():  # all checked before any is counted
                self.totals.of(model).raise_to(whole)
            self.totals.turns = max(self.totals.turns, turns)


class CodexParser(Parser):
    """Codex ``exec --json`` (``ThreadEvent`` in @openai/codex-sdk): ``thread.started``
    names the thread (its session id); each ``turn.completed`` has that turn's ``usage``,
    whose ``input_tokens`` include the ``cached_input_tokens``. No model, no cost: the
    model is the one ``--agent-args -m`` names, and the project's price table prices it."""

    def read(self, line):
        event = _json(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "thread.started":
            self.session(event.get("thread_id"))
        elif kind == "turn.completed" and isinstance(event.get("usage"), dict):
            usage = event["usage"]
            given, cached = (
                tokens(usage.get("input_tokens")),
                tokens(usage.get("cached_input_tokens")),
            )
            step = ModelTotals(
                input_tokens=max(given - cached, 0),
                output_tokens=tokens(usage.get("output_tokens")),
                cache_read_tokens=cached,
                cache_write_tokens=tokens(usage.get("cache_write_input_tokens")),
            )
            self.totals.of(self.totals.model).add(step)
            self.totals.turns += 1


class GeminiParser(Parser):
    """Gemini CLI ``--output-format stream-json``: ``init`` names the session and model;
    ``result`` carries ``stats.models``, the whole run per model (``input_tokens`` is the
    prompt, cached part included; ``cached``; ``input``, the part not cached). No cost."""

    def read(self, line):
        event = _json(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "init":
            self.session(event.get("session_id"))
            self.totals.model = model_name(event.get("model")) or self.totals.model
        elif kind == "result" and isinstance(event.get("stats"), dict):
            models = event["stats"].get("models")
            if not isinstance(models, dict):
                return
            found = {}
            for name, stats in models.items():
                model = model_name(name)
                if model is None or not isinstance(stats, dict):
                    continue
                prompt, cached = tokens(stats.get("input_tokens")), tokens(stats.get("cached"))
                fresh = stats.get("input")
                found[model] = ModelTotals(
                    input_tokens=tokens(fresh) if fresh is not None else max(prompt - cached, 0),
                    output_tokens=tokens(stats.get("output_tokens")),
                    cache_read_tokens=cached,
                )
            for model, whole in found.items():
                self.totals.of(model).raise_to(whole)
                self.totals.model = model
            self.totals.turns = max(self.totals.turns, 1)


class OpencodeParser(Parser):
    """opencode ``run --format json``: every event has ``sessionID``; each ``step_finish``
    holds its step's ``part`` (``StepFinishPart``: ``tokens`` {input, output, reasoning,
    cache {read, write}} and ``cost``). A cost of 0 beside tokens means opencode knew no
    price for the model: not reported, so the price table may price it."""

    def read(self, line):
        event = _json(line)
        if event is None:
            return
        self.session(event.get("sessionID"))
        part = event.get("part")
        if event.get("type") != "step_finish" or not isinstance(part, dict):
            return
        used = part.get("tokens")
        if not isinstance(used, dict):
            return
        cache = used.get("cache") if isinstance(used.get("cache"), dict) else {}
        step = ModelTotals(
            input_tokens=tokens(used.get("input")),
            output_tokens=tokens(used.get("output")) + tokens(used.get("reasoning")),
            cache_read_tokens=tokens(cache.get("read")),
            cache_write_tokens=tokens(cache.get("write")),
        )
        cost = dollars(part.get("cost", 0))
        if cost > 0:
            step.cost_usd = cost
        self.totals.of(self.totals.model).add(step)
        self.totals.turns += 1


AIDER_MODEL = re.compile(rb"^(?:Main )?[Mm]odel: (\S+) with ")
AIDER_TOKENS = re.compile(
    rb"^Tokens: ([0-9.]+k?) sent(?:, ([0-9.]+k?) cache write)?(?:, ([0-9.]+k?) cache hit)?,"
    rb" ([0-9.]+k?) received\."
)
AIDER_COST = re.compile(rb"Cost: \$([0-9.]+) message, \$([0-9.]+) session\.")


def _aider_count(text: bytes | None) -> int:
    """aider's rounded counts: ``950``, ``2.3k``, ``12k``."""
    if not text:
        return 0
    if text.endswith(b"k"):
        return tokens(int(Decimal(text[:-1].decode()) * 1000))
    return tokens(int(Decimal(text.decode())))


class AiderParser(Parser):
    """aider's text: ``Model: NAME with … edit format`` at the start; after each message
    ``Tokens: 2.3k sent, 1.1k cache write, 950 cache hit, 120 received.`` and, when it knows
    the model's price, ``Cost: $0.01 message, $0.05 session.`` Its counts are rounded to
    hundreds above a thousand; the session cost is its running total. No session id."""

    def read(self, line):
        line = line.rstrip(b"\r\n")
        if found := AIDER_MODEL.match(line):
            self.totals.model = (
                model_name(found.group(1).decode(errors="replace")) or self.totals.model
            )
            return
        if found := AIDER_TOKENS.match(line):
            sent, write, hit, received = (found.group(i) for i in range(1, 5))
            cached_write, cached_hit = _aider_count(write), _aider_count(hit)
            step = ModelTotals(
                # "sent" includes what was written to the cache (aider adds it in)
                input_tokens=max(_aider_count(sent) - cached_write, 0),
                output_tokens=_aider_count(received),
                cache_read_tokens=cached_hit,
                cache_write_tokens=cached_write,
            )
            self.totals.of(self.totals.model).add(step)
            self.totals.turns += 1
        if found := AIDER_COST.search(line):
            session = dollars(found.group(2).decode())
            mine = self.totals.of(self.totals.model)
            mine.cost_usd = max(mine.cost_usd or Decimal(0), session)


PARSERS = {
    "claude": ClaudeParser,
    "codex": CodexParser,
    "gemini": GeminiParser,
    "opencode": OpencodeParser,
    "aider": AiderParser,
}


class StreamReader:
    """Drains a pipe on its own thread: to the log (up to ``MAX_LOG``) and, line by line
    (each up to ``MAX_LINE``, ``MAX_PARSED`` in all), to the parser."""

    CHUNK = 64 << 10

    def __init__(self, pipe, log, parser: Parser | None):
        self.pipe, self.log, self.parser = pipe, log, parser
        self.logged = self.parsed = 0
        self.skipped_lines = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending, skipping = bytearray(), False
        while (
            chunk := self.pipe.read1(self.CHUNK)
            if hasattr(self.pipe, "read1")
            else self.pipe.read(self.CHUNK)
        ):
            if self.logged < MAX_LOG:
                part = chunk[: MAX_LOG - self.logged]
                self.log.write(part)
                self.log.flush()
                self.logged += len(part)
            if self.parser is None or self.parsed >= MAX_PARSED:
                continue
            self.parsed += len(chunk)
            while chunk:
                end = chunk.find(b"\n")
                piece, chunk = (chunk, b"") if end < 0 else (chunk[: end + 1], chunk[end + 1 :])
                if not skipping:
                    pending += piece
                    if len(pending) > MAX_LINE:
                        pending.clear()
                        skipping = True
                        self.skipped_lines += 1
                if end >= 0:
                    if not skipping and pending:
                        self.parser.feed(bytes(pending))
                    pending.clear()
                    skipping = False
        if pending and not skipping and self.parser is not None:
            self.parser.feed(bytes(pending))

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
