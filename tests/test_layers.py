"""The layers of the house, read from the code's own imports with ``ast``, its models'
relations and its migrations' dependencies.

``LAYERS`` is the one place the layering is written: an app may import only itself and
the apps before it. The test also fails on any circle between modules (counting imports
inside functions, which must not be used to dodge one) and on a first-party import inside
a function that does not say why it is there (``# lazy: …``).

A model's relation (foreign key, one-to-one, many-to-many) and a migration's dependency
point down too, except the links ``UPWARD_RELATIONS`` and ``UPWARD_MIGRATIONS`` name, each
with the reason it remains (docs/architecture.md, "Upward links that remain"). A new
upward link fails, and so does an exception whose link is gone.

No module of an app is longer than ``MAX_LINES``: a newcomer finds a concern by its
module's name, not by scrolling (docs/architecture.md, "What each app owns"). Nor is a
test module: a test is found by its file's name too.
"""

import ast
from pathlib import Path

from django.apps import apps
from django.db.migrations.loader import MigrationLoader

from oversight.plan import strongly_connected

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. docs/architecture.md says what each holds.
LAYERS = [
    "projects",
    "decisions",
    "evidence",
    "runner",
    "tasks",
    "landing",
    "oversight",
    "interop",
    "codehosts",
    "events",
    "demo",
    "factory_site",
]


# The relations that still point up, until the plan in docs/architecture.md moves them.
UPWARD_RELATIONS = {
    "projects.Event.task": "a task's timeline is one indexed query over the audit trail",
    "decisions.Decision.proposed_in": "the attempt an agent proposed it in (who may not decide)",
    "decisions.Decision.tasks": "the tasks a decision concerns, declared on the decision",
    "evidence.Evidence.attempt": "evidence is stored beside the attempt it proves",
    "evidence.GateRun.attempt": "a gate run judges one attempt",
}
# Dependencies of migrations written before the kernel existed or for the links above;
# an applied migration is history, so they stay until the apps' migrations are squashed.
UPWARD_MIGRATIONS = {
    "decisions.0002_initial -> tasks.0001_initial": "adds Decision.proposed_in and .tasks",
    "decisions.0005_imported_origin -> tasks.0007_criteria_verdicts": (
        "makemigrations named the newest tasks migration of the time; nothing in it needs tasks"
    ),
    "evidence.0002_initial -> tasks.0001_initial": "adds Evidence.attempt and GateRun.attempt",
    "evidence.0004_gate_run_finished_index -> tasks.0004_event_to_state_blank": (
        "makemigrations named the newest tasks migration of the time; nothing in it needs tasks"
    ),
    "evidence.0005_evidence_project -> tasks.0004_event_to_state_blank": (
        "Project lived in tasks then; its data step reads tasks.Attempt"
    ),
    "projects.0001_initial -> tasks.0004_event_to_state_blank": (
        "Project, Membership and Event moved out of tasks, keeping their tables (ADR 0011)"
    ),
}

# A module longer than this is split by concern (issue 24).
MAX_LINES = 800
# The apps whose modules are measured: the layers, and the agent side's own distribution.
MEASURED_APPS = [*LAYERS, "client"]
# Longer ones that remain, each with why, until it is split; one that shrinks is removed.
LONG_MODULES: dict[str, str] = {}


def modules() -> dict[str, Path]:
    found = {}
    for app in LAYERS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path):
    """``(module imported, line, inside a function, the line's comment or the one above)``."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    functions = [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    nested = {
        id(child) for function in functions for child in ast.walk(function) if child is not function
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        comment = lines[node.lineno - 1].partition("#")[2]
        above = node.lineno - 2
        while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
            above -= 1  # a comment above a block of imports speaks for all of them
        if above >= 0 and lines[above].strip().startswith("#"):
            comment += " #" + lines[above].strip().removeprefix("#")
        comment = comment.strip()
        for name in names:
            yield name, node.lineno, id(node) in nested, comment


def graph():
    known = modules()
    edges = {}
    for name, path in known.items():
        for target, line, inside, comment in imports(path):
            if target in known and target != name:
                edges.setdefault(name, {})[target] = (line, inside, comment)
    return known, edges


def app_of(module: str) -> str:
    return module.split(".")[0]


def test_every_import_points_down_the_layers():
    _, edges = graph()
    upward = [
        f"{source}:{line} imports {target}"
        for source, targets in edges.items()
        for target, (line, _, _) in targets.items()
        if LAYERS.index(app_of(target)) > LAYERS.index(app_of(source))
    ]

    assert upward == []


def test_no_module_is_in_an_import_circle():
    _, edges = graph()
    successors = {node: list(targets) for node, targets in edges.items()}
    for targets in edges.values():
        for target in targets:
            successors.setdefault(target, [])

    circles = [c for c in strongly_connected(successors) if len(c) > 1]

    assert circles == []


def test_an_import_inside_a_function_says_why():
    _, edges = graph()
    unexplained = [
        f"{source}:{line} imports {target}"
        for source, targets in edges.items()
        for target, (line, inside, comment) in targets.items()
        if inside and "lazy:" not in comment
    ]

    assert unexplained == []


def test_the_layers_are_the_apps_in_the_order_django_loads_them():
    from django.conf import settings

    ours = [app for app in settings.INSTALLED_APPS if app in LAYERS]

    assert ours == LAYERS[:-1]


def up(source: str, target: str, layers: list[str]) -> bool:
    """Whether a link from app ``source`` to app ``target`` climbs the layers."""
    return source in layers and target in layers and layers.index(target) > layers.index(source)


def upward_relations(layers: list[str]) -> set[str]:
    """``app.Model.field`` for each relation a model declares to a model of a higher app."""
    return {
        f"{model._meta.label}.{field.name}"
        for model in apps.get_models()
        for field in model._meta.get_fields()
        if field.is_relation
        and not field.auto_created
        and field.related_model is not None
        and up(model._meta.app_label, field.related_model._meta.app_label, layers)
    }


def upward_migrations(layers: list[str]) -> set[str]:
    """``app.migration -> app.migration`` for each dependency on a higher app's migration."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return {
        f"{app}.{name} -> {target}.{target_name}"
        for (app, name), migration in loader.disk_migrations.items()
        for target, target_name in migration.dependencies
        if up(app, target, layers)
    }


def test_every_model_relation_points_down_the_layers_but_the_listed_ones():
    found = upward_relations(LAYERS)

    assert sorted(found - UPWARD_RELATIONS.keys()) == [], "a new upward relation"
    assert sorted(UPWARD_RELATIONS.keys() - found) == [], "an exception whose link is gone"


def test_every_migration_depends_down_the_layers_but_the_listed_ones():
    found = upward_migrations(LAYERS)

    assert sorted(found - UPWARD_MIGRATIONS.keys()) == [], "a new upward dependency"
    assert sorted(UPWARD_MIGRATIONS.keys() - found) == [], "an exception whose link is gone"


def test_a_relation_or_migration_up_the_layers_is_found():
    # With tasks below projects, every link from tasks to projects climbs.
    relations = upward_relations(["tasks", "projects"])
    migrations = upward_migrations(["tasks", "projects"])

    assert {"tasks.Task.project", "tasks.Label.project"} <= relations
    assert "projects.Event.task" not in relations
    assert "tasks.0005_projects_members_and_events_move_out -> projects.0001_initial" in migrations


def long_modules(root: Path = ROOT, apps_measured=tuple(MEASURED_APPS)) -> dict[str, int]:
    """``{path: lines}`` of each module of an app longer than ``MAX_LINES``, migrations aside."""
    found = {}
    for app in apps_measured:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts or ".venv" in path.parts:
                continue
            count = len(path.read_text().splitlines())
            if count > MAX_LINES:
                found[path.relative_to(root).as_posix()] = count
    return found


def test_no_module_of_an_app_is_longer_than_800_lines_but_the_listed_ones():
    found = long_modules()

    assert {p: n for p, n in found.items() if p not in LONG_MODULES} == {}, "split it by concern"
    assert sorted(LONG_MODULES.keys() - found.keys()) == [], "an exception no longer needed"


def test_a_long_module_is_reported_with_its_path_and_length(tmp_path):
    (tmp_path / "tasks" / "migrations").mkdir(parents=True)
    (tmp_path / "tasks" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "tasks" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "tasks" / "migrations" / "0001_initial.py").write_text("x = 1\n" * 2000)

    assert long_modules(tmp_path, ["tasks"]) == {"tasks/long.py": MAX_LINES + 1}


def test_no_test_module_is_longer_than_800_lines():
    # Python files only: data the tests read (tests/authz_matrix.tsv, tests/fixtures/) is not
    # code to walk through (issue 34).
    assert long_modules(ROOT, ["tests"]) == {}, "split it by concern"


def test_a_long_test_module_is_reported_with_its_path_and_length(tmp_path):
    (tmp_path / "tests" / "tasks").mkdir(parents=True)
    (tmp_path / "tests" / "tasks" / "test_long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "tests" / "test_short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "tests" / "matrix.tsv").write_text("a\tb\n" * 2000)

    assert long_modules(tmp_path, ["tests"]) == {"tests/tasks/test_long.py": MAX_LINES + 1}
