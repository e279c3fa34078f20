"""The agent presets, their output parsers, the stream reader and `factory init`, without a
server: each preset's command against the real CLI's --help (through the stand-in, which
accepts exactly those options), each parser against the output shapes the CLIs publish."""

import importlib.util
import json
import os
import subprocess
import threading
import tracemalloc
from decimal import Decimal
from types import SimpleNamespace

import pytest
from factory_client import cli, instructions, presets, streams
from factory_client.usage import StreamMeter, UsageMeter
from factory_client.work import MAX_USAGE_FILE, TaskRun

from tests.client.standins import FIXTURES, STANDIN, check_output, install

spec = importlib.util.spec_from_file_location("standin", STANDIN)
standin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(standin)


def parsed(preset, resume=None, extra=""):
    argv = presets.PRESETS[preset].argv(preset, resume=resume, extra=extra)
    return standin.parse(preset, argv[1:])


# --- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_every_option_a_preset_passes_is_one_its_cli_lists(name):
    given, positional = parsed(name)

    expected = {
        "claude": ({"-p", "--output-format", "--verbose", "--permission-mode"}, []),
        "codex": ({"--json", "--sandbox", "--color"}, ["-"]),
        "gemini": ({"--output-format", "--approval-mode", "-p"}, []),
        "aider": (
            {
                "--message-file",
                "--yes-always",
                "--no-auto-commits",
                "--no-dirty-commits",
                "--no-gitignore",
                "--no-check-update",
                "--no-analytics",
                "--no-pretty",
                "--no-fancy-input",
                "--input-history-file",
                "--chat-history-file",
            },
            [],
        ),
        "opencode": ({"--format", "--file"}, [presets.PROMPT]),
    }[name]
    assert (set(given), positional) == expected


@pytest.mark.parametrize("name", ["claude", "codex", "opencode"])
def test_a_resuming_command_names_the_session_as_its_cli_says(name):
    given, positional = parsed(name, resume="sess-1")

    resumed = {
        "claude": given.get("--resume"),
        "codex": positional[:1],
        "opencode": given.get("--session"),
    }[name]
    assert resumed == ["sess-1"]


def test_a_preset_that_cannot_resume_refuses_to_build_a_resuming_command():
    with pytest.raises(ValueError, match="gemini cannot resume a session"):
        presets.PRESETS["gemini"].argv("gemini", resume="sess-1")


def test_agent_args_are_appended_as_shell_words_and_name_the_model():
    preset = presets.PRESETS["codex"]

    argv = preset.argv("/usr/bin/codex", extra="-m 'gpt-5-codex' --add-dir /tmp/x")

    assert argv[-4:] == ["-m", "gpt-5-codex", "--add-dir", "/tmp/x"]
    assert preset.model_hint("--model=o3") == "o3"
    assert preset.model_hint("-c x=1") is None
    assert presets.PRESETS["aider"].model_hint("-m 'fix it'") is None  # aider's -m: --message


@pytest.mark.parametrize(
    ("name", "code", "said"),
    [
        ("claude", 1, "error: unknown option '--bogus'"),
        ("codex", 2, "error: unexpected argument '--bogus' found"),
        ("gemini", 1, "Unknown arguments: bogus"),
        ("opencode", 1, "Unknown argument: bogus"),
        ("aider", 2, "aider: error: unrecognized arguments: --bogus"),
    ],
)
def test_an_option_the_cli_does_not_list_fails_the_standin_as_it_fails_the_cli(
    tmp_path, name, code, said
):
    argv = presets.PRESETS[name].argv(str(install(tmp_path, name)), extra="--bogus")

    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)

    assert (done.returncode, done.stderr.strip()) == (code, said)


# --- what the CLIs print ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_the_example_outputs_have_the_shapes_the_packages_publish(name):
    example = next(p for p in (FIXTURES / name).iterdir() if p.name.startswith("output."))

    assert check_output(name, example.read_text()) == []


TURNS = [
    {"model": "m-big", "input": 1200, "output": 300, "cache_read": 4000, "cache_write": 900},
    {"model": "m-big", "input": 500, "output": 100, "cache_read": 0, "cache_write": 0},
]


@pytest.fixture
def demo(tmp_path):
    (tmp_path / "w" / ".factory").mkdir(parents=True)
    (tmp_path / "w" / "claimqueue.py").write_text("def f(ready):\n    ready.sort()\n")
    (tmp_path / "w" / ".factory" / "brief.md").write_text("The brief.")
    return tmp_path / "w"


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_the_standins_output_has_the_published_shape_and_parses_to_its_turns(tmp_path, demo, name):
    turns = [{**t, "cost": 0.25} for t in TURNS]
    argv = presets.PRESETS[name].argv(str(install(tmp_path / "bin", name)), extra="--model m-big")
    env = {**os.environ, "STANDIN_TURNS": json.dumps(turns)}

    done = subprocess.run(argv, cwd=demo, env=env, input="brief", capture_output=True, text=True)
    parser = streams.PARSERS[name]("m-big")
    for line in done.stdout.encode().splitlines(keepends=True):
        parser.feed(line)

    assert done.returncode == 0, done.stderr
    assert check_output(name, done.stdout) == []
    used = parser.snapshot().models["m-big"]
    assert (used.input_tokens, used.output_tokens) == (1700, 400)
    assert (used.cache_read_tokens, used.cache_write_tokens) == (
        4000,
        0 if name == "gemini" else 900,  # Gemini CLI's stats count no cache writes
    )
    assert used.cost_usd == (None if name in ("codex", "gemini") else Decimal("0.5"))


def read_fixture(name, hint=None):
    parser = streams.PARSERS[name](hint)
    example = next(p for p in (FIXTURES / name).iterdir() if p.name.startswith("output."))
    for line in example.read_bytes().splitlines(keepends=True):
        parser.feed(line)
    totals = parser.snapshot()
    return totals, {m: vars(t) for m, t in totals.models.items()}


def used(i, o, r, w, cost=None):
    return {
        "input_tokens": i,
        "output_tokens": o,
        "cache_read_tokens": r,
        "cache_write_tokens": w,
        "cost_usd": None if cost is None else Decimal(cost),
    }


def test_claude_codes_result_gives_the_run_per_model_with_its_cost():
    totals, models = read_fixture("claude")

    assert models == {"claude-sonnet-4-5": used(1500, 230, 4000, 4000, "0.0321")}
    assert (totals.turns, totals.session_id) == (2, "3f1c2a9e-8b7d-4e2a-9c1f-5d6e7f8a9b0c")


def test_codex_turns_count_cached_input_apart_and_name_no_cost():
    totals, models = read_fixture("codex", "gpt-5-codex")

    assert models == {"gpt-5-codex": used(6000, 900, 18000, 0)}
    assert (totals.turns, totals.session_id) == (1, "0199a3b1-7c2d-7e10-9a4b-1c2d3e4f5a6b")


def test_gemini_stats_give_the_uncached_input_and_the_cache():
    totals, models = read_fixture("gemini")

    assert models == {"gemini-2.5-pro": used(9000, 800, 6000, 0)}
    assert totals.session_id == "5b6c7d8e-1f2a-4b3c-8d9e-0a1b2c3d4e5f"


def test_opencode_steps_add_reasoning_to_output_and_carry_their_cost():
    totals, models = read_fixture("opencode", "anthropic/claude-sonnet-4-5")

    assert models == {"anthropic/claude-sonnet-4-5": used(3000, 300, 10000, 0, "0.0123")}
    assert totals.session_id == "ses_6a7b8c9d0e1fABCDEF"


def test_aiders_text_gives_its_model_rounded_tokens_and_session_cost():
    totals, models = read_fixture("aider")

    assert models == {"gpt-4o": used(2300, 120, 0, 0, "0.0070")}
    assert totals.session_id is None


@pytest.mark.parametrize(
    "line",
    [
        {"type": "result", "modelUsage": {"m": {"inputTokens": 5, "costUSD": -1}}},
        {"type": "result", "modelUsage": {"m": {"inputTokens": 5, "costUSD": 1e9}}},
        {"type": "result", "modelUsage": {"m": {"inputTokens": 10**15, "costUSD": 1}}},
        {"type": "result", "modelUsage": {"m": {"inputTokens": -5, "costUSD": 1}}},
        {"type": "result", "modelUsage": {"m": {"inputTokens": True, "costUSD": 1}}},
        {"type": "result", "modelUsage": {"m": {"inputTokens": 5, "costUSD": "NaN"}}},
        {"type": "assistant", "message": {"id": "x", "usage": {"output_tokens": -1}}},
    ],
)
def test_a_negative_or_absurd_figure_refuses_its_whole_event(line):
    parser = streams.ClaudeParser()
    parser.feed(b'{"type":"assistant","message":{"id":"a","model":"m","usage":{"input_tokens":7}}}')

    parser.feed(json.dumps(line).encode())

    totals = parser.snapshot()
    assert {m: t.input_tokens for m, t in totals.models.items()} == {"m": 7}
    assert totals.models["m"].cost_usd is None
    assert len(totals.refused) == 1


@pytest.mark.parametrize("session", ["--dangerously-skip-permissions", "../../x", "a b", 7])
def test_a_session_id_that_could_be_a_flag_or_a_path_is_not_kept(session):
    parser = streams.ClaudeParser()

    parser.feed(json.dumps({"type": "system", "subtype": "init", "session_id": session}).encode())

    assert parser.snapshot().session_id is None


def test_the_meter_sends_what_grew_per_model_and_a_final_cost_once():
    parser, clock = streams.ClaudeParser(), SimpleNamespace(now=10.0)
    meter = StreamMeter(parser, clock=lambda: clock.now)
    message = {"id": "m1", "model": "m-a", "usage": {"input_tokens": 100, "output_tokens": 5}}
    parser.feed(json.dumps({"type": "assistant", "message": message}).encode())
    clock.now += 3
    first = meter.pending()
    meter.sent(first)
    result = {"inputTokens": 100, "outputTokens": 9, "costUSD": 0.02}
    parser.feed(json.dumps({"type": "result", "modelUsage": {"m-a": result}}).encode())

    second = meter.pending()

    assert first == {
        "model": "m-a",
        "input_tokens": 100,
        "output_tokens": 5,
        "by_model": {"m-a": {"input_tokens": 100, "output_tokens": 5}},
        "wall_seconds": 3.0,
    }
    assert second == {
        "output_tokens": 4,
        "cost_usd": "0.02",
        "by_model": {"m-a": {"output_tokens": 4, "cost_usd": "0.02"}},
    }
    meter.sent(second)
    assert meter.pending() is None


def test_usage_without_a_model_goes_only_into_the_sums():
    parser = streams.CodexParser()
    meter = StreamMeter(parser, clock=lambda: 0.0)

    parser.feed(b'{"type":"turn.completed","usage":{"input_tokens":50,"output_tokens":2}}')

    assert meter.pending() == {"input_tokens": 50, "output_tokens": 2}


# --- bounded reading ----------------------------------------------------------------------------


def test_a_hundred_megabytes_of_output_is_read_in_bounded_memory(tmp_path):
    read, write = os.pipe()
    log = (tmp_path / "log").open("wb")
    parser = streams.ClaudeParser()
    result = {"type": "result", "num_turns": 3, "modelUsage": {"m": {"costUSD": 0.5}}}

    def agent():
        with os.fdopen(write, "wb") as out:
            line = b"y" * (4 << 20) + b"\n"
            for _ in range(25):
                out.write(line)
            out.write(json.dumps(result).encode() + b"\n")

    tracemalloc.start()
    writer = threading.Thread(target=agent)
    writer.start()
    reader = streams.StreamReader(os.fdopen(read, "rb", buffering=0), log, parser)
    writer.join()
    reader.join()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    log.close()

    assert parser.snapshot().models["m"].cost_usd == Decimal("0.5")
    assert reader.skipped_lines == 25
    assert (tmp_path / "log").stat().st_size == streams.MAX_LOG
    assert peak < 16 << 20  # the writer's own 4 MiB line included; 100 MiB went through


def usage_meter_over(workspace):
    return UsageMeter(lambda: TaskRun._read_usage(SimpleNamespace(workspace=workspace)))


def test_a_usage_file_that_is_a_link_is_not_read(tmp_path):
    (tmp_path / "w" / ".factory").mkdir(parents=True)
    (tmp_path / "secret.json").write_text('{"cost_usd": "5", "input_tokens": 9}')
    (tmp_path / "w" / ".factory" / "usage.json").symlink_to(tmp_path / "secret.json")

    assert set(usage_meter_over(tmp_path / "w").pending() or {}) <= {"wall_seconds"}


def test_a_usage_file_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    (tmp_path / "w" / ".factory").mkdir(parents=True)
    os.mkfifo(tmp_path / "w" / ".factory" / "usage.json")

    assert set(usage_meter_over(tmp_path / "w").pending() or {}) <= {"wall_seconds"}


def test_a_hundred_megabyte_usage_file_is_not_read(tmp_path):
    (tmp_path / "w" / ".factory").mkdir(parents=True)
    with (tmp_path / "w" / ".factory" / "usage.json").open("wb") as big:
        big.write(b'{"input_tokens": 5, "pad": "')
        big.truncate(100 << 20)

    assert TaskRun._read_usage(SimpleNamespace(workspace=tmp_path / "w")) is None
    assert MAX_USAGE_FILE == 64 << 10


# --- the executable -----------------------------------------------------------------------------


def test_an_executable_committed_in_the_repository_is_never_found(tmp_path):
    repo = tmp_path / "repo"
    install(repo / "bin", "claude")
    link_dir = tmp_path / "links"
    link_dir.mkdir()
    (link_dir / "claude").symlink_to(repo / "bin" / "claude")
    path = os.pathsep.join([str(repo / "bin"), ".", "", "bin", str(link_dir)])

    assert presets.find_executable("claude", outside=[repo], path=path) is None


def test_the_first_executable_outside_the_repository_is_found(tmp_path):
    repo, safe = tmp_path / "repo", tmp_path / "tools"
    install(repo / "bin", "claude")
    found = install(safe, "claude")
    path = os.pathsep.join([str(repo / "bin"), str(safe)])

    assert presets.find_executable("claude", outside=[repo], path=path) == found


def test_factory_agents_lists_each_preset_found_and_its_version(tmp_path, monkeypatch, capsys):
    for name in ("claude", "codex"):
        install(tmp_path / "bin", name)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))

    code = cli.main(["agents", "--repo", str(tmp_path / "repo"), "--json"])

    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert code == 0
    assert (rows["claude"]["found"], rows["claude"]["version"]) == (
        str(tmp_path / "bin" / "claude"),
        "2.1.197 (Claude Code)",
    )
    assert rows["codex"]["version"] == "codex-cli 0.171.0"
    assert (rows["gemini"]["found"], rows["gemini"]["version"]) == (None, None)


def test_a_version_that_never_answers_is_said_so(tmp_path, monkeypatch):
    hang = tmp_path / "claude"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    monkeypatch.setattr(presets, "VERSION_TIMEOUT", 0.5)

    said = presets.version(hang, presets.PRESETS["claude"])

    assert said == "no answer to --version within 0.5 s"


# --- factory init -------------------------------------------------------------------------------


def init(repo, *args):
    return cli.main(["init", "--repo", str(repo), *args])


def test_init_writes_the_section_into_the_files_there_and_touches_nothing_else(tmp_path):
    (tmp_path / "CLAUDE.md").write_text("# Ours\n\nKeep this.\n")

    assert init(tmp_path) == 0

    assert (tmp_path / "CLAUDE.md").read_text() == "# Ours\n\nKeep this.\n\n" + instructions.block()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CLAUDE.md"]
    assert init(tmp_path, "--check") == 0


def test_init_without_any_file_makes_agents_md_and_adds_those_asked_for(tmp_path):
    assert init(tmp_path, "--file", "GEMINI.md") == 0

    assert sorted(p.name for p in tmp_path.iterdir()) == ["GEMINI.md"]
    assert (tmp_path / "GEMINI.md").read_text() == instructions.block()


def test_init_rewrites_only_between_the_markers(tmp_path):
    before, after = "# Top\n\n", "\n## Ours after\n"
    old = f"{instructions.START}\nold text\n{instructions.END}\n"
    (tmp_path / "AGENTS.md").write_text(before + old + after)

    assert init(tmp_path, "--check") == 1
    assert init(tmp_path) == 0

    assert (tmp_path / "AGENTS.md").read_text() == before + instructions.block() + after
    assert init(tmp_path, "--check") == 0


def test_a_section_edited_to_say_push_to_main_is_stale(tmp_path, capsys):
    init(tmp_path)
    text = (tmp_path / "AGENTS.md").read_text()
    (tmp_path / "AGENTS.md").write_text(
        text.replace("Never push to the target branch", "Always push to main")
    )

    assert init(tmp_path, "--check") == 1
    assert capsys.readouterr().err == (
        "AGENTS.md: its factory-memory section differs from `factory init`'s; run `factory init`\n"
    )


def test_markers_out_of_order_are_refused_and_the_file_is_unchanged(tmp_path):
    text = f"# X\n{instructions.END}\n{instructions.START}\n"
    (tmp_path / "AGENTS.md").write_text(text)

    assert init(tmp_path) == 2
    assert (tmp_path / "AGENTS.md").read_text() == text


def test_an_instruction_file_that_is_a_link_is_not_written_through(tmp_path):
    (tmp_path / "elsewhere.md").write_text("not ours\n")
    (tmp_path / "CLAUDE.md").symlink_to(tmp_path / "elsewhere.md")

    assert init(tmp_path) == 2
    assert (tmp_path / "elsewhere.md").read_text() == "not ours\n"


def test_the_mcp_server_offers_the_same_text_as_a_prompt():
    from factory_client.mcp import work_through_factory_memory

    assert work_through_factory_memory() == instructions.SECTION
