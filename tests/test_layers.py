"""The layers of the house, read from the code's own imports with ``ast``.

``LAYERS`` is the one place the layering is written: an app may import only itself and
the apps before it. The test also fails on any circle between modules (counting imports
inside functions, which must not be used to dodge one) and on a first-party import inside
a function that does not say why it is there (``# lazy: …``).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. docs/architecture.md says what each holds.
LAYERS = [
    "projects",
    "decisions",
    "evidence",
    "runner",
    "tasks",
    "interop",
    "events",
    "factory_site",
]


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
    circles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)

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
