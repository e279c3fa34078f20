"""The landing proof's own checks (proof/landing.py), on made-up runs: what counts as a
violation must not drift while nobody runs the full form."""

from datetime import UTC, datetime, timedelta

from proof.landing import flaky_ids, recheck, scenario, throughput, throughput_kept

FLAKY_A = "tests/test_flaky_a.py::FlakyATest::test_coin"


def junit(*failing: tuple[str, str]) -> bytes:
    cases = "".join(
        f'<testcase classname="{classname}" name="{name}"><failure message="x"/></testcase>'
        for classname, name in failing
    )
    passing = '<testcase classname="tests.test_registry.RegistryTest" name="test_base"/>'
    return f'<?xml version="1.0"?><testsuite name="unittest">{passing}{cases}</testsuite>'.encode()


def test_a_flaky_test_failing_on_a_recheck_is_excused():
    report = junit(("tests.test_flaky_a.FlakyATest", "test_coin"))

    assert FLAKY_A in flaky_ids()
    assert recheck(1, report, flaky_ids()) == (True, [FLAKY_A], "")


def test_any_other_failure_on_a_recheck_is_the_commits():
    report = junit(
        ("tests.test_flaky_a.FlakyATest", "test_coin"),
        ("tests.test_feature_3.Feature3Test", "test_one"),
    )

    ok, excused, why = recheck(1, report, flaky_ids())

    assert (ok, excused) == (False, [])
    assert why == "failing: tests/test_feature_3.py::Feature3Test::test_one"


def test_a_quarantined_test_is_excused_and_a_failure_without_a_named_test_is_not():
    quarantined = "tests/test_red.py::RedTest::test_main_is_green"
    report = junit(("tests.test_red.RedTest", "test_main_is_green"))

    assert recheck(1, report, {quarantined}) == (True, [quarantined], "")
    assert recheck(1, junit(), flaky_ids())[0] is False
    assert recheck(1, None, flaky_ids())[0] is False
    assert recheck(1, b"<testsuite", flaky_ids())[0] is False


def test_throughput_counts_from_the_first_approval_to_the_last_landing():
    start = datetime(2026, 12, 6, 12, tzinfo=UTC)
    queued = [start + timedelta(seconds=s) for s in (0, 5, 100)]
    landed = [start + timedelta(seconds=s) for s in (30, 60, 120)]

    figures = throughput(landed, queued)

    assert (figures["landed"], figures["seconds"], figures["per_minute"]) == (3, 120.0, 1.5)
    assert throughput([], queued)["per_minute"] is None


def test_throughput_with_flakes_may_be_at_most_15_percent_slower():
    without = {"per_minute": 10.0}

    assert throughput_kept({"per_minute": 8.6}, without, 0.15)["violations"] == 0
    assert throughput_kept({"per_minute": 12.0}, without, 0.15)["violations"] == 0
    slower = throughput_kept({"per_minute": 8.4}, without, 0.15)
    assert (slower["violations"], slower["slower_by"]) == (1, 0.16)
    assert slower["examples"] == [
        "8.4 landed per minute with flakes, 10.0 without: 16.0% slower (at most 15%)"
    ]
    assert throughput_kept({"per_minute": None}, without, 0.15)["violations"] == 1


def test_each_run_side_by_side_records_only_its_own_faults(monkeypatch):
    def execute(run, *, keep):
        run.faults.append({"kind": "red_target", "run": run.name})
        return {
            "violations": 0,
            "landing": {
                "throughput": {"per_minute": 10.0},
                "conflicts_per_100_tasks": 0,
                "returns_per_100_tasks": 0,
            },
            "invariants": {
                "no_change_returned_for_a_flake": {"violations": 0},
                "landed_commits_pass": {"violations": 0},
                "paused_and_fast_lane_kept": {"violations": 0},
            },
            "faults": run.faults,
        }

    monkeypatch.setattr("proof.landing.execute", execute)

    result = scenario(short=False).execute()

    assert [[f["run"] for f in run["faults"]] for run in result["runs"]] == [
        ["landing"],
        ["landing-noflakes"],
        ["landing-apart"],
    ]
    assert (
        result["violations"],
        result["checks"]["throughput_with_flakes_within_15_percent"]["violations"],
    ) == (0, 0)
