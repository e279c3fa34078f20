"""A scripted coding agent for `factory work`'s tests: ``python3 agent.py MODE``.

fix         restore the claim queue's dependency filter (the demo's failing test passes)
touch       add a file inside tasks/ (any small change)
crash       exit 3
hang        write its pid to $AGENT_PID_FILE and sleep
checkpoint  save .factory/checkpoint.json and exit 1 (unfinished)
resume      print the checkpoint it finds, then fix
slow        write its pid to $AGENT_PID_FILE, sleep 3 s, then fix
wipe        fix, then delete .factory/
nothing     change nothing
blocked     write .factory/blocked.md
link NAME   fix, then make .factory/NAME a link to $AGENT_LINK_TARGET
fifo NAME   fix, then make .factory/NAME a FIFO (a read of it would wait for ever)

With $AGENT_USAGE set, it first writes that text to .factory/usage.json (its running totals).
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path

FILTER = '    ready = [t for t in ready if all(dep in done for dep in t.get("depends_on", ()))]\n'


def fix() -> None:
    source = Path("claimqueue.py").read_text()
    Path("claimqueue.py").write_text(
        source.replace("    ready.sort(", FILTER + "    ready.sort(", 1)
    )
    Path(".factory/summary.md").write_text(
        "Claims respect dependencies again\n\nThe filter was lost.\n"
    )


mode = sys.argv[1]
brief = sys.stdin.read() if not sys.stdin.isatty() else ""
print(f"agent {mode} on {os.environ['FACTORY_TASK']} (attempt {os.environ['FACTORY_ATTEMPT']})")
print(
    f"brief on stdin: {len(brief)} chars; brief file: {Path(os.environ['FACTORY_BRIEF']).exists()}"
)
if os.environ.get("AGENT_USAGE"):
    Path(".factory/usage.json").write_text(os.environ["AGENT_USAGE"])
if mode == "fix":
    fix()
elif mode == "touch":
    Path("tasks").mkdir(exist_ok=True)
    Path(f"tasks/{os.environ['FACTORY_TASK']}.txt").write_text("done\n")
elif mode == "crash":
    sys.exit(3)
elif mode == "hang":
    Path(os.environ["AGENT_PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(600)
elif mode == "checkpoint":
    Path(".factory/checkpoint.json").write_text(json.dumps({"step": "half way"}))
    time.sleep(1)  # long enough for the loop to see it
    sys.exit(1)
elif mode == "resume":
    print("checkpoint:", Path(".factory/checkpoint.json").read_text())
    fix()
elif mode == "slow":
    Path(os.environ["AGENT_PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(3)
    fix()
elif mode == "wipe":
    fix()
    shutil.rmtree(".factory")
elif mode == "blocked":
    Path(".factory/blocked.md").write_text("The spec contradicts FM-D1.\n")
elif mode == "link":
    fix()
    Path(".factory", sys.argv[2]).unlink(missing_ok=True)
    Path(".factory", sys.argv[2]).symlink_to(os.environ["AGENT_LINK_TARGET"])
elif mode == "fifo":
    fix()
    Path(".factory", sys.argv[2]).unlink(missing_ok=True)
    os.mkfifo(Path(".factory", sys.argv[2]))
