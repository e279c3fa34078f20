"""``factory``: the agent API from a shell. One subcommand per call.

Prints a short summary by default and the API's JSON with ``--json``. A refusal
prints ``<code>: <detail>`` on stderr and exits 1; a server or network failure
exits 3; bad usage exits 2; ``factory wait`` past its timeout exits 6
(``EXIT_CODES``). ``--json`` goes before or after the subcommand; ``factory
completion bash|zsh`` prints a completion script.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import zipfile
from importlib import metadata
from pathlib import Path, PurePath

import factory_client
from factory_client import completion, files, instructions, presets, work
from factory_client.client import TASK_STATES, FactoryClient, FactoryError, WaitTimeout

EXIT_TIMEOUT = 6  # after work.py's 4 and 5


def _print_json(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def cmd_claim(client, args):
    result = client.claim(project=args.project, labels=args.label or (), lease_seconds=args.lease)
    if args.json:
        return _print_json(result)
    if result is None:
        print("No claimable task.")
        return None
    task, attempt = result["task"], result["attempt"]
    print(f"Claimed {task['key']}: {task['title']}")
    print(
        f"attempt {attempt['id']} (#{attempt['number']}), lease until {attempt['lease_expires_at']}"
    )
    return None


def cmd_context(client, args):
    if args.json:
        return _print_json(client.context(args.key, max_chars=args.max_chars))
    # The brief ends with its own newline.
    print(client.brief(args.key, max_chars=args.max_chars), end="")
    return None


def _usage(args) -> dict | None:
    return json.loads(args.usage) if args.usage else None


def cmd_heartbeat(client, args):
    result = client.heartbeat(args.attempt, lease_seconds=args.lease, usage=_usage(args))
    return _print_json(result) if args.json else print(f"Lease until {result['lease_expires_at']}")


def cmd_checkpoint(client, args):
    if args.set is None:
        result = client.checkpoint(args.attempt)
    else:
        result = client.save_checkpoint(args.attempt, json.loads(args.set), args.revision)
    return (
        _print_json(result)
        if args.json
        else print(f"revision {result['revision']}: {json.dumps(result['data'])}")
    )


def cmd_evidence(client, args):
    result = client.evidence(args.attempt, args.path, args.kind, criteria=args.criteria or ())
    if args.json:
        return _print_json(result)
    mark = " (authoritative)" if result["authoritative"] else ""
    print(
        f"Evidence {result['id']}: {result['kind']} {result['size']} bytes sha256 {result['sha256']}{mark}"
    )
    return None


def cmd_decide(client, args):
    alternatives = [{"option": option, "reason": ""} for option in args.alternative or ()]
    result = client.decide(
        args.attempt,
        args.title,
        args.context,
        args.decision,
        consequences=args.consequences or "",
        alternatives=alternatives,
    )
    return (
        _print_json(result) if args.json else print(f"Proposed {result['key']}: {result['title']}")
    )


def cmd_submit(client, args):
    change = {
        k: v
        for k, v in {"commit": args.commit, "branch": args.branch, "url": args.url}.items()
        if v
    }
    result = client.submit(
        args.attempt,
        args.summary,
        change=change,
        idempotency_key=args.idempotency_key,
        usage=_usage(args),
    )
    return (
        _print_json(result)
        if args.json
        else print(f"Submitted {result['task']} attempt {result['attempt']}: {result['state']}")
    )


def runner_line(runner: dict | None) -> str:
    """The runner's status on an attempt, in one line."""
    if runner is None:
        return "runner: not in this project's gate policy"
    if not runner["verified"]:
        return f"runner: {runner['state']}, not verified ({runner['summary']})"
    commit = (runner["commit"] or "")[:12]
    return (
        f"runner: {runner['state']} at {commit} in {runner['seconds']:.1f} s: {runner['summary']}"
    )


def usage_lines(usage: dict | None) -> list[str]:
    """An attempt's self-reported usage and its void, if it has any, in a line each."""
    if not usage:
        return []
    lines = []
    if usage.get("cost_usd") not in (None, "0.00") or usage.get("input_tokens"):
        lines.append(
            f"usage: ${usage['cost_usd']} self-reported, {usage['input_tokens']} tokens in,"
            f" {usage['output_tokens']} out"
        )
    voided = usage.get("voided")
    if voided:
        lines.append(
            f"voided by {voided['by']}: ${voided['usage']['cost_usd']} reported until then"
            f" counts toward no budget ({voided['reason']})"
        )
    return lines


def cmd_attempt(client, args):
    if args.void_usage is not None:
        if not args.void_usage.strip():
            raise FactoryError(
                0, "invalid", "--void-usage needs a reason: say why it should not count"
            )
        result = client.void_usage(args.attempt, args.void_usage)
    else:
        result = client.attempt(args.attempt)
    if args.json:
        return _print_json(result)
    print(f"Attempt {result['id']} of {result['task']} (#{result['number']}): {result['state']}")
    for run in result.get("gate_runs", []):
        print(f"  {run['gate']:<20} {run['state']:<8} {run['summary']}")
    if args.void_usage is None:
        print(runner_line(result.get("runner")))
    for line in usage_lines(result.get("usage")):
        print(line)
    return None


def cmd_release(client, args):
    result = client.release(args.attempt, reason=args.reason or "", blocked=args.blocked)
    return _print_json(result) if args.json else print(f"Attempt {result['id']} {result['state']}")


def criterion_mark(value: str) -> dict:
    """``AC-3=met``, ``AC-1=not_met:why`` or ``AC-2=na``: a verdict on one criterion."""
    key, _, rest = value.partition("=")
    verdict, _, note = rest.partition(":")
    if not key or verdict not in ("met", "not_met", "na"):
        raise argparse.ArgumentTypeError(
            f"{value!r}: write KEY=met, KEY=not_met or KEY=na, with :note if you like"
        )
    return {"key": key, "verdict": verdict, "note": note}


def cmd_review(client, args):
    result = client.review(
        args.key, args.verdict, reason=args.reason or "", criteria=args.criterion or []
    )
    return _print_json(result) if args.json else print(f"{result['key']} is {result['state']}")


def _zip_folder(root: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink() and ".git" not in path.parts:
                archive.write(path, path.relative_to(root).as_posix())
    return buffer.getvalue()


def cmd_import(client, args):
    path = Path(args.path)
    if path.is_dir():
        data, name = _zip_folder(path), f"{path.name}.zip"
    else:
        data, name = path.read_bytes(), path.name
    mapping = Path(args.mapping).read_text() if args.mapping else None
    run = client.import_files(
        args.project,
        args.format,
        data,
        name,
        apply=args.apply,
        mapping=mapping,
        origin_name=args.origin_name,
    )
    if args.json:
        return _print_json(run)
    counts = ", ".join(f"{n} {what}" for what, n in run["report"]["counts"].items())
    done = (
        "applied" if run["state"] == "applied" else "dry run: nothing written (--apply writes it)"
    )
    print(f"Import #{run['id']} into {run['project']} as {run['origin_name']}: {done}. {counts}")
    for skip in run["report"]["skipped"]:
        print(f"  skipped {skip['source']}: {skip['reason']}")
    return None


def cmd_export(client, args):
    name, data = client.export(args.project, args.format, spec=args.spec)
    if args.output == "-":
        sys.stdout.buffer.write(data)
        return None
    # The site's suggested name is only a name: no folder of it is used.
    target = Path(args.output) if args.output else Path(PurePath(name).name or "export")
    try:
        files.write_file(target.parent, target.name, data)
    except files.UnsafePath as exc:
        raise FactoryError(400, "invalid", exc.naming(str(target))) from None
    print(f"Wrote {target} ({len(data)} bytes)")
    return None


def cmd_tasks(client, args):
    result = client.tasks(project=args.project, state=args.state, label=args.label)
    if args.json:
        return _print_json(result)
    for task in result:
        print(f"{task['key']:<10} {task['state']:<10} {task['title']}")
    return None


def cmd_decisions(client, args):
    result = client.decisions(q=args.q, state=args.state, project=args.project)
    if args.json:
        return _print_json(result)
    for decision in result:
        print(f"{decision['key']:<10} {decision['state']:<11} {decision['title']}")
    return None


def cmd_landing(client, args):
    if args.dequeue:
        if not args.reason:
            raise FactoryError(
                0, "invalid", "--dequeue needs --reason: say why it leaves the queue"
            )
        result = client.dequeue(args.project, args.dequeue, args.to, args.reason)
        return _print_json(result) if args.json else print(f"{result['key']} is {result['state']}")
    if args.revert:
        result = client.revert(args.revert, args.reason)
        return (
            _print_json(result) if args.json else print(f"the revert of {result['key']} is queued")
        )
    if args.cancel_revert:
        result = client.cancel_revert(args.cancel_revert, args.reason)
        return (
            _print_json(result)
            if args.json
            else print(f"the revert of {result['key']} is cancelled; it stays {result['state']}")
        )
    if args.fast:
        result = client.fast_lane(args.project, args.fast, args.reason, alone=args.alone)
    elif args.pause is not None:
        result = client.pause_landing(args.project, args.pause, args.until)
    elif args.resume:
        result = client.resume_landing(args.project, args.reason or "")
    else:
        result = client.landing(args.project)
    if args.json:
        return _print_json(result)
    setting = result["landing"]
    print(
        f"Landing {setting['mode']} ({setting['method']}, batches of up to "
        f"{setting['batch_max']}); {result['landed_per_hour']} landed in the last hour"
    )
    lander = result.get("lander") or {}
    paused = lander.get("paused")
    if paused:
        until = f" until {paused['until']}" if paused.get("until") else " until a resume"
        print(
            f"Paused by {paused.get('by') or 'someone'} since {paused['since']}{until}: "
            f"{paused['reason']}"
        )
    if lander.get("state") == "backing_off":
        print(f"The lander backs off since {lander.get('since')}: {lander.get('reason')}")
    if not result["queue"]:
        print("Nothing queued.")
    for item in result["queue"]:
        fast = item.get("fast")
        lane = f"  [fast lane: {fast['reason']}]" if fast else ""
        print(
            f"{item['position']:>3}. {item['task']:<10} {item['state']:<8} "
            f"{(item.get('commit') or '')[:12]}  {item['title']}{lane}"
        )
    for batch in result["batches"][:5]:
        outcomes = ", ".join(f"{c['task']} {c['outcome']}" for c in batch["changes"])
        print(f"batch {batch['id']}: {batch['state']}, {batch['verify_runs']} runs — {outcomes}")
    return None


def cmd_wait(client, args):
    try:
        task = client.wait_for_task(args.key, args.until, args.timeout)
    except WaitTimeout as timeout:
        print(f"timeout: {timeout.detail}", file=sys.stderr)
        if args.json:
            _print_json(timeout.body)
        return EXIT_TIMEOUT
    return _print_json(task) if args.json else print(f"{task['key']} is {task['state']}")


def task_states(value: str) -> list[str]:
    """``in_review,done``: task states, a usage error (exit 2) if one is unknown."""
    states = [state.strip() for state in value.split(",") if state.strip()]
    unknown = [state for state in states if state not in TASK_STATES]
    if not states or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown task state {', '.join(unknown) or '(none)'}: "
            f"choose from {', '.join(TASK_STATES)}"
        )
    return states


def cmd_agents(client, args):
    """The presets of ``factory work --agent``, whether each CLI is found (outside
    ``--repo``) and its version."""
    rows = presets.describe(outside=[args.repo.resolve()])
    if args.json:
        return _print_json(rows)
    for row in rows:
        where = row["found"] or "not found on the PATH"
        said = f" ({row['version']})" if row["version"] else ""
        print(
            f"{row['name']:<9} {row['title']:<12} {where}{said}; "
            f"written against {row['written_against']}"
            + ("; resumes its session" if row["resumes"] else "")
        )
    return None


def cmd_init(client, args):
    """Write (or with --check, check) the Factory Memory section of the agent files."""
    repo = args.repo.resolve()
    try:
        if args.check:
            stale = instructions.check(repo, args.file or [])
            for name, why in stale:
                print(f"{name}: {why}; run `factory init`", file=sys.stderr)
            if not stale:
                print("factory init: up to date")
            return 1 if stale else 0
        for name, what in instructions.write(repo, args.file or []):
            print(f"{name}: {what}")
    except (instructions.Unreadable, files.UnsafePath) as exc:
        print(f"factory init: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_completion(client, args):
    print(completion.script(args.shell, build_parser()), end="")


EXIT_CODES = """\
exit codes:
  0  done
  1  refused by the API (a 4xx answer), or no token
  2  usage error
  3  the server could not be reached, or answered 5xx
  4  factory work: the task was released (the agent failed, changed nothing, was blocked,
     or the push was refused)
  5  factory work: the lease was lost and the agent stopped
  6  factory wait: the timeout passed before the task reached the states
  130, 143  factory work: interrupted (Ctrl-C) or terminated; the task was released
"""


def client_version() -> str:
    """The installed distribution's version, else the package's ``__version__``."""
    try:
        return metadata.version("factory-client")
    except metadata.PackageNotFoundError:
        return getattr(factory_client, "__version__", "unknown")


def json_text(value: str) -> str:
    """An argument that must be JSON: a usage error (exit 2) otherwise."""
    try:
        json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    return value


def shared_options() -> argparse.ArgumentParser:
    """The options every subcommand also takes after its name."""
    shared = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: when not given after the subcommand, the top-level value stands.
    shared.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON"
    )
    return shared


class Subcommand(argparse.ArgumentParser):
    """The parser of every subcommand, whoever adds it: it has the shared options."""

    def __init__(self, *, parents=(), **kwargs):
        super().__init__(parents=[shared_options(), *parents], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="factory",
        description="Factory Memory from the shell.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", help="server URL (default $FACTORY_URL)")
    parser.add_argument("--token", help="bearer token (default $FACTORY_TOKEN)")
    parser.add_argument(
        "--json", action="store_true", help="print the API's JSON (here or after the subcommand)"
    )
    parser.add_argument("--version", action="version", version=f"factory {client_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Subcommand)

    p = sub.add_parser("claim", help="claim the best claimable task")
    p.add_argument("--project")
    p.add_argument("--label", action="append", help="repeatable")
    p.add_argument("--lease", type=int, help="lease seconds")
    p.set_defaults(run=cmd_claim)

    p = sub.add_parser("context", help="the context bundle of a task")
    p.add_argument("key")
    p.add_argument("--max-chars", type=int)
    p.set_defaults(run=cmd_context)

    p = sub.add_parser("heartbeat", help="extend the lease")
    p.add_argument("attempt", type=int)
    p.add_argument("--lease", type=int)
    p.add_argument(
        "--usage",
        type=json_text,
        help='what was used since the last report, e.g. {"input_tokens": 900, "cost_usd": "0.02"}',
    )
    p.set_defaults(run=cmd_heartbeat)

    p = sub.add_parser("checkpoint", help="show, or with --set save, the checkpoint")
    p.add_argument("attempt", type=int)
    p.add_argument("--set", type=json_text, help="JSON to save")
    p.add_argument("--revision", type=int, default=0, help="the revision you last saw")
    p.set_defaults(run=cmd_checkpoint)

    p = sub.add_parser("evidence", help="attach a file as evidence")
    p.add_argument("attempt", type=int)
    p.add_argument("path")
    p.add_argument("--kind", required=True)
    p.add_argument("--criteria", action="append", help="criterion key; repeatable")
    p.set_defaults(run=cmd_evidence)

    p = sub.add_parser("decide", help="propose a decision during an attempt")
    p.add_argument("attempt", type=int)
    p.add_argument("--title", required=True)
    p.add_argument("--context", required=True)
    p.add_argument("--decision", required=True)
    p.add_argument("--consequences")
    p.add_argument("--alternative", action="append", help="a rejected option; repeatable")
    p.set_defaults(run=cmd_decide)

    p = sub.add_parser("submit", help="submit the attempt for checking")
    p.add_argument("attempt", type=int)
    p.add_argument("--summary", required=True)
    p.add_argument("--commit", help="the commit's full id (git rev-parse HEAD)")
    p.add_argument("--branch")
    p.add_argument("--url")
    p.add_argument("--idempotency-key")
    p.add_argument(
        "--usage",
        type=json_text,
        help='what was used since the last report, e.g. {"input_tokens": 900, "cost_usd": "0.02"}',
    )
    p.set_defaults(run=cmd_submit)

    p = sub.add_parser("attempt", help="an attempt's state, gate runs and runner verdict")
    p.add_argument("attempt", type=int)
    p.add_argument(
        "--void-usage",
        metavar="REASON",
        help="void the usage it reported so far, so no budget counts it (managers)",
    )
    p.set_defaults(run=cmd_attempt)

    p = sub.add_parser("release", help="give the task back, or --blocked")
    p.add_argument("attempt", type=int)
    p.add_argument("--reason")
    p.add_argument("--blocked", action="store_true")
    p.set_defaults(run=cmd_release)

    p = sub.add_parser("review", help="approve or reject a task in review")
    p.add_argument("key")
    p.add_argument("verdict", choices=["approve", "reject"])
    p.add_argument("--reason")
    p.add_argument(
        "--criterion",
        action="append",
        type=criterion_mark,
        metavar="KEY=VERDICT[:NOTE]",
        help="a verdict on a criterion: met, not_met or na (repeat the flag); each criterion"
        " judged in review must be marked to approve",
    )
    p.set_defaults(run=cmd_review)

    p = sub.add_parser("import", help="import spec-kit, OpenSpec, MADR or beads files (dry run)")
    p.add_argument("format", choices=["speckit", "openspec", "madr", "beads"])
    p.add_argument("path", help="the folder (zipped on the way) or the .jsonl / archive file")
    p.add_argument("--project", required=True)
    p.add_argument("--apply", action="store_true", help="write it; without, only the report")
    p.add_argument("--mapping", help="spec-kit: a JSON file naming each criterion's proof")
    p.add_argument(
        "--origin-name",
        help="the name that tells these files' records from another upload's (two repositories'"
        " docs/decisions/0013): letters, digits, . _ -, up to 64; default: the file's or"
        " folder's name. Give the same name each time you import the same files",
    )
    p.set_defaults(run=cmd_import)

    p = sub.add_parser("export", help="export decisions (madr), tasks (beads) or a spec (speckit)")
    p.add_argument("format", choices=["madr", "beads", "speckit"])
    p.add_argument("--project", required=True)
    p.add_argument("--spec", help="speckit: the spec's key")
    p.add_argument("-o", "--output", help="file to write; - for standard output")
    p.set_defaults(run=cmd_export)

    p = sub.add_parser("tasks", help="list tasks")
    p.add_argument("--project")
    p.add_argument("--state")
    p.add_argument("--label")
    p.set_defaults(run=cmd_tasks)

    p = sub.add_parser(
        "landing",
        help="a project's landing queue; --dequeue a task or put it in the --fast lane, --pause "
        "or --resume landing, --revert a landed task or --cancel-revert it (managers)",
    )
    p.add_argument("--project", required=True)
    change = p.add_mutually_exclusive_group()
    change.add_argument("--dequeue", metavar="KEY", help="take this task out of the queue")
    change.add_argument("--pause", metavar="REASON", help="pause landing: approvals still queue")
    change.add_argument("--resume", action="store_true", help="lift the pause (--reason: why)")
    change.add_argument(
        "--fast", metavar="KEY", help="land this queued task next (--reason: why; --alone)"
    )
    change.add_argument(
        "--revert", metavar="KEY", help="land the revert of this task's change (--reason: why)"
    )
    change.add_argument(
        "--cancel-revert",
        metavar="KEY",
        help="take back this task's queued revert (--reason: why)",
    )
    p.add_argument("--alone", action="store_true", help="with --fast: in a batch by itself")
    p.add_argument("--until", metavar="TIME", help="with --pause: when it ends (ISO 8601)")
    p.add_argument("--to", choices=["in_review", "ready"], default="ready")
    p.add_argument("--reason")
    p.set_defaults(run=cmd_landing)

    p = sub.add_parser("decisions", help="search decisions")
    p.add_argument("q", nargs="?")
    p.add_argument("--state")
    p.add_argument("--project")
    p.set_defaults(run=cmd_decisions)

    p = sub.add_parser(
        "wait",
        help="wait until a task reaches one of some states",
        description="Wait until the task is in one of the states given to --until, then print "
        'it ("FM-12 is in_review"); follows the live stream, or polls where the site has none. '
        "Exits 6 if the timeout passes first.",
    )
    p.add_argument("key")
    p.add_argument(
        "--until",
        required=True,
        type=task_states,
        metavar="STATES",
        help=f"comma-separated task states ({', '.join(TASK_STATES)})",
    )
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS", help="default 600")
    p.set_defaults(run=cmd_wait)

    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script: `source <(factory completion bash)` in "
        "~/.bashrc; for zsh, save `factory completion zsh` as _factory in a directory of $fpath.",
    )
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(run=cmd_completion, local=True)

    p = sub.add_parser(
        "agents", help="the coding-agent presets of `factory work --agent`: found, version"
    )
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="never look inside it")
    p.set_defaults(run=cmd_agents, local=True)

    p = sub.add_parser(
        "init",
        help="write the Factory Memory section of AGENTS.md, CLAUDE.md, GEMINI.md",
        description=instructions.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="the repository (default: .)")
    p.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any section is stale"
    )
    p.add_argument(
        "--file",
        action="append",
        choices=instructions.NAMES,
        help="also write this file when it does not exist yet (repeatable)",
    )
    p.set_defaults(run=cmd_init, local=True)

    work.add_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "dequeue", None) and not (args.reason or "").strip():
        parser.error("landing --dequeue needs --reason: say why it leaves the queue")
    if getattr(args, "pause", None) is not None and not args.pause.strip():
        parser.error("landing --pause needs a reason: say why landing pauses")
    if getattr(args, "run", None) is cmd_landing and args.until and args.pause is None:
        parser.error("landing --until goes with --pause")
    if getattr(args, "fast", None) and not (args.reason or "").strip():
        parser.error("landing --fast needs --reason: say why it goes first")
    if getattr(args, "revert", None) and not (args.reason or "").strip():
        parser.error("landing --revert needs --reason: say why it is reverted")
    if getattr(args, "cancel_revert", None) and not (args.reason or "").strip():
        parser.error("landing --cancel-revert needs --reason: say why the revert is cancelled")
    if getattr(args, "run", None) is cmd_landing and args.alone and not args.fast:
        parser.error("landing --alone goes with --fast")
    if getattr(args, "void_usage", None) is not None and not args.void_usage.strip():
        parser.error("attempt --void-usage needs a reason: say why it should not count")
    if getattr(args, "local", False):  # needs no server, nor a token
        return args.run(None, args) or 0
    try:
        with FactoryClient(args.url, args.token) as client:
            code = args.run(client, args)
    except FactoryError as exc:
        # One line, whatever the server or the network said: exit codes in EXIT_CODES.
        print(" ".join(f"{exc.code}: {exc.detail}".split()), file=sys.stderr)
        if args.json and exc.body:
            _print_json(exc.body)
        return 1 if 400 <= exc.status < 500 or exc.code == "no_token" else 3
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
