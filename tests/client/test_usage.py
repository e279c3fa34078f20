"""`factory work`'s usage meter: the agent's running totals become increments, each sent once."""

import json

from factory_client.usage import UsageMeter


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def meter_reading(files: list):
    """A meter whose usage.json holds each of ``files`` in turn (the last one stays)."""
    clock = Clock()
    contents = [
        None if f is None else f.encode() if isinstance(f, str) else json.dumps(f).encode()
        for f in files
    ]

    def read():
        return contents.pop(0) if len(contents) > 1 else contents[0]

    return UsageMeter(read, clock=clock), clock


def test_totals_become_increments_and_the_wall_time_is_measured():
    meter, clock = meter_reading(
        [
            {"model": "m-1", "input_tokens": 100, "cost_usd": "0.10"},
            {"model": "m-1", "input_tokens": 250, "output_tokens": 7, "cost_usd": 0.25},
        ]
    )
    clock.now += 30
    first = meter.pending()
    meter.sent(first)
    clock.now += 12.5
    second = meter.pending()

    assert first == {
        "model": "m-1",
        "input_tokens": 100,
        "cost_usd": "0.1",
        "wall_seconds": 30.0,
    }
    assert second == {
        "input_tokens": 150,
        "output_tokens": 7,
        "cost_usd": "0.15",
        "wall_seconds": 12.5,
    }


def test_an_increment_not_taken_is_sent_again_with_the_next():
    meter, clock = meter_reading([{"input_tokens": 10}, {"input_tokens": 30}])
    clock.now += 1
    meter.pending()  # the heartbeat failed: sent() is not called

    assert meter.pending() == {"input_tokens": 30, "wall_seconds": 1.0}


def test_malformed_or_shrinking_totals_add_nothing():
    meter, _ = meter_reading(
        [
            {"input_tokens": 50, "cost_usd": "1"},
            '{"input_tok',  # half-written
            {"input_tokens": -5, "output_tokens": True, "cost_usd": "-2", "model": ""},
            {"input_tokens": 20, "cost_usd": "1e3", "model": "x" * 101},
            [1, 2],
        ]
    )
    meter.sent(meter.pending() or {})

    assert [meter.pending() for _ in range(4)] == [None, None, None, None]


def test_no_file_sends_only_the_wall_time():
    meter, clock = meter_reading([None])
    clock.now += 2

    assert meter.pending() == {"wall_seconds": 2.0}
