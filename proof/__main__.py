"""``python -m proof SCENARIO [--short]``: run a proof scenario; print JSON; exit 1 on any violation."""

import argparse
import json
import sys

from proof.scenarios import SCENARIOS, execute


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m proof", description=__doc__)
    parser.add_argument("scenarios", nargs="+", choices=[*SCENARIOS, "all"])
    parser.add_argument("--short", action="store_true", help="the few-minute version CI runs")
    parser.add_argument(
        "--keep", action="store_true", help="keep the database and logs of each run"
    )
    args = parser.parse_args()
    names = list(SCENARIOS) if "all" in args.scenarios else args.scenarios
    results = []
    for name in names:
        run, inject = SCENARIOS[name](args.short)
        result = execute(run, inject, keep=args.keep)
        results.append(result)
        print(json.dumps(result, indent=2), flush=True)
    return 0 if all(result["ok"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
