"""A batch's state machine: written down once, drawn from the code, and the only way its
state changes (issue 34, item 7)."""

import ast
import re
from pathlib import Path

from landing.lander import land
from landing.models import Batch, BatchState
from landing.states import drawing, edges
from projects.models import Event
from tests.landing.conftest import broken, feature

ROOT = Path(__file__).resolve().parents[2]


def test_the_drawing_in_the_docs_is_the_one_the_code_makes():
    text = (ROOT / "docs" / "landing.md").read_text()
    drawn = re.search(
        r"<!-- batch-states:start -->\n```mermaid\n(.*?)\n```\n<!-- batch-states:end -->",
        text,
        re.DOTALL,
    )
    assert drawn is not None, "docs/landing.md has no drawing of a batch's states"
    assert drawn.group(1) == drawing()


def test_every_state_is_reached_and_only_the_active_ones_are_left():
    sources = {source for source, _, _ in edges()}
    targets = {target for _, target, _ in edges()}
    assert targets | {BatchState.BUILDING} == set(BatchState.values)
    assert sources == {"building", "verifying", "pushing", "abandoned"}


def test_no_module_of_the_lander_assigns_a_batchs_state():
    for path in (ROOT / "landing").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                    assert not (isinstance(item, ast.Attribute) and item.attr == "state"), (
                        f"{path.name}:{node.lineno} sets a state directly; fire a transition"
                    )


def test_each_move_of_a_batch_is_an_event_in_order(queue, origin, flow, script):
    queue.approved(feature("alpha"), branch="alpha")
    queue.approved(broken("beta"), branch="beta")

    land(flow.project)

    first = Batch.objects.order_by("pk").first()
    moves = list(
        Event.objects.filter(object_id=first.pk, content_type__model="batch")
        .order_by("pk")
        .values_list("transition", "from_state", "to_state")
    )
    assert moves == [
        ("verify", "building", "verifying"),
        ("push", "verifying", "pushing"),
        ("reach", "pushing", "landed"),
    ]
    assert first.state == BatchState.LANDED


def test_the_lander_reaches_git_through_landing_git_alone():
    # The mirror's fetch included: no other module of the lander imports the runner's git.
    found = []
    for path in sorted((ROOT / "landing").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("runner"):
                names = {alias.name for alias in node.names}
                if node.module == "runner.mirror" or "mirror" in names:
                    found.append(
                        f"{path.name}: from {node.module} import {', '.join(sorted(names))}"
                    )
    assert found == [
        "git.py: from runner import mirror",
        "git.py: from runner.mirror import GitError, changed_paths, git, stream, tree_of",
        "locks.py: from runner.mirror import root",  # where the lock files live, not git
    ]
