"""Stand-in agent CLIs on a PATH of their own (tests/fixtures/agents/standin.py)."""

import json
import re
import sys
from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "agents"
STANDIN = FIXTURES / "standin.py"
SHAPES = json.loads((FIXTURES / "shapes.json").read_text())
TYPES = {
    "str": str,
    "int": int,
    "bool": bool,
    "list": list,
    "dict": dict,
    "number": (int, float),
    "null": type(None),
}


def install(directory: Path, name: str) -> Path:
    """An executable ``directory/name`` that runs the stand-in for CLI ``name``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" {name} "$@"\n')
    path.chmod(0o755)
    return path


def mismatches(value, shape, where="") -> list[str]:
    """Where ``value`` lacks a key of ``shape`` or has it with another JSON type."""
    if isinstance(shape, str):
        wanted = TYPES[shape]
        if isinstance(value, bool) and shape in ("int", "number"):
            return [f"{where}: a boolean"]
        return [] if isinstance(value, wanted) else [f"{where}: not {shape}"]
    if not isinstance(value, dict):
        return [f"{where}: not an object"]
    found = []
    for key, inner in shape.items():
        if key == "*":
            for name, item in value.items():
                found += mismatches(item, inner, f"{where}.{name}")
        elif key not in value:
            found.append(f"{where}.{key}: missing")
        else:
            found += mismatches(value[key], inner, f"{where}.{key}")
    return found


def check_output(cli: str, text: str) -> list[str]:
    """Every line of ``text`` against the CLI's published shapes; the problems found."""
    spec, problems = SHAPES[cli], []
    if cli == "aider":
        for line in text.splitlines():
            shaped = line.startswith(("Aider v", "Model:", "Main model:", "Tokens:"))
            if shaped and not any(re.match(p, line) for p in spec["lines"]):
                problems.append(f"line not in aider's shape: {line}")
        return problems
    for n, line in enumerate(text.splitlines()):
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        kind = event.get(spec["key"])
        if kind not in spec["events"]:
            problems.append(f"line {n}: unknown event {kind!r}")
            continue
        problems += mismatches(event, spec["events"][kind], f"line {n} {kind}")
    return problems
