"""The plan drawn as SVG, laid out in Python (no script, no build step).

Tasks linked by dependencies are drawn left to right in layers: a task's layer is the
length of the longest chain of tasks it waits on (over the graph with its cycles
condensed: a cycle's tasks share a layer). Inside a layer, tasks are
ordered by a few sweeps of the barycentre heuristic, starting from key order, so fewer
edges cross and the same plan is always drawn the same way. Tasks linked to none are
drawn in a grid below. Each task is a link to its page; the critical path is drawn heavier.
"""

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from oversight.plan import key_order, strongly_connected

NODE_W, NODE_H = 172, 48
COL_GAP, ROW_GAP = 48, 12
MARGIN = 16
GRID_HEAD = 34  # room for the heading of the grid of unlinked tasks
TITLE_CHARS = 23
SWEEPS = 4


def layout(plan: dict) -> dict:
    """Where each node goes: ``{layers: [[keys…]…], loose: [keys…]}``."""
    successors, predecessors = {}, {}
    for edge in plan["edges"]:
        a, b = edge["from"], edge["to"]
        for key in (a, b):
            successors.setdefault(key, [])
            predecessors.setdefault(key, [])
        if a != b:
            successors[a].append(b)
            predecessors[b].append(a)
    components = strongly_connected(successors)
    component_of = {k: n for n, c in enumerate(components) for k in c}
    depth = {}
    # Components come sinks first: walking them backwards meets every predecessor first.
    for n in range(len(components) - 1, -1, -1):
        before = {component_of[p] for k in components[n] for p in predecessors[k]} - {n}
        depth[n] = 1 + max((depth[m] for m in before), default=-1)
    layers = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for key in sorted(component_of, key=key_order):
        layers[depth[component_of[key]]].append(key)
    _order_by_barycentre(layers, successors, predecessors)
    keys = [n["key"] for n in plan["nodes"]]
    return {"layers": layers, "loose": [k for k in keys if k not in component_of]}


def _order_by_barycentre(layers: list[list[str]], successors: dict, predecessors: dict) -> None:
    """Reorder each layer by the mean position of its neighbours in the layer before it
    (sweeping down) or after it (sweeping up); a task without such neighbours keeps its
    place. Stable and deterministic: ties keep the current order."""
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        span = range(1, len(layers)) if down else range(len(layers) - 2, -1, -1)
        for i in span:
            neighbour_layer = layers[i - 1] if down else layers[i + 1]
            where = {k: n for n, k in enumerate(neighbour_layer)}
            neighbours = predecessors if down else successors
            centre = {}
            for n, key in enumerate(layers[i]):
                seen = [where[k] for k in neighbours[key] if k in where]
                centre[key] = sum(seen) / len(seen) if seen else n
            layers[i].sort(key=lambda k: centre[k])


def draw(plan: dict) -> SafeString:
    """The plan as an SVG element (the page's text alternative lists the same nodes)."""
    nodes = {n["key"]: n for n in plan["nodes"]}
    placed = layout(plan)
    layers, loose = placed["layers"], placed["loose"]
    pitch_x, pitch_y = NODE_W + COL_GAP, NODE_H + ROW_GAP
    tallest = max((len(layer) for layer in layers), default=0)
    graph_w = MARGIN * 2 + len(layers) * pitch_x - COL_GAP if layers else 0
    graph_h = MARGIN * 2 + tallest * pitch_y - ROW_GAP if layers else 0
    columns = max(len(layers), 4)
    grid_w = MARGIN * 2 + columns * pitch_x - COL_GAP
    width = max(graph_w, grid_w if loose else 0)

    at = {}
    for i, layer in enumerate(layers):
        top = MARGIN + (tallest - len(layer)) * pitch_y / 2  # centre short layers
        for n, key in enumerate(layer):
            at[key] = (MARGIN + i * pitch_x, top + n * pitch_y)
    height = graph_h
    if loose:
        head_y = graph_h + (MARGIN if layers else 0)
        rows = -(-len(loose) // columns)
        for n, key in enumerate(loose):
            at[key] = (
                MARGIN + (n % columns) * pitch_x,
                head_y + GRID_HEAD + (n // columns) * pitch_y,
            )
        height = head_y + GRID_HEAD + rows * pitch_y - ROW_GAP + MARGIN

    path = plan["critical_path"]["keys"]
    step = {key: n for n, key in enumerate(path)}
    body = [
        "<defs>"
        '<marker id="plan-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"'
        ' markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z"'
        ' class="arrow"/></marker>'
        '<marker id="plan-arrow-critical" viewBox="0 0 10 10" refX="9" refY="5"'
        ' markerWidth="3.5" markerHeight="3.5" orient="auto-start-reverse">'
        '<path d="M0 0L10 5L0 10z" class="arrow critical"/></marker>'
        "</defs>"
    ]
    # Edges first, so the nodes are drawn over them.
    for edge in plan["edges"]:
        a, b = edge["from"], edge["to"]
        critical = a in step and b in step and step[b] == step[a] + 1
        body.append(_edge(at[a], at[b], critical))
    if loose:
        body.append(
            f'<text x="{MARGIN}" y="{_num(head_y + 20)}" class="grid-head">'
            f"{'Waiting on no task and waited on by none' if layers else 'No task waits on another'}"
            f" ({len(loose)})</text>"
        )
    for key in [k for layer in layers for k in layer] + loose:
        body.append(_node(nodes[key], at[key], key in step))

    summary = _summary(plan)
    return mark_safe(
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_num(width)} {_num(height)}"'
        f' width="{_num(width)}" height="{_num(height)}" role="group"'
        ' aria-labelledby="plan-svg-title" aria-describedby="plan-svg-desc">'
        f'<title id="plan-svg-title">{escape(summary[0])}</title>'
        f'<desc id="plan-svg-desc">{escape(summary[1])}</desc>' + "".join(body) + "</svg>"
    )


def _summary(plan: dict) -> tuple[str, str]:
    nodes = plan["nodes"]
    title = f"Dependency graph of {len(nodes)} task{'s' if len(nodes) != 1 else ''}"
    path = plan["critical_path"]
    desc = (
        f"Critical path: {' → '.join(path['keys'])} ({path['hours']} h)."
        if path["keys"]
        else "No unfinished task."
    )
    if plan["cycles"]:
        desc += " Waiting on each other: " + "; ".join(", ".join(c) for c in plan["cycles"]) + "."
    return title, desc + " The table below lists every task."


def _edge(a: tuple, b: tuple, critical: bool) -> str:
    x1, y1 = a[0] + NODE_W, a[1] + NODE_H / 2
    x2, y2 = b[0], b[1] + NODE_H / 2
    if x2 <= x1:  # within a layer (a cycle): loop out to the right and back
        x2, y2 = b[0] + NODE_W, b[1] + NODE_H / 2
        bend = x1 + COL_GAP / 2
        d = f"M{_num(x1)} {_num(y1)}C{_num(bend)} {_num(y1)} {_num(bend)} {_num(y2)} {_num(x2)} {_num(y2)}"
    else:
        mid = (x1 + x2) / 2
        d = f"M{_num(x1)} {_num(y1)}C{_num(mid)} {_num(y1)} {_num(mid)} {_num(y2)} {_num(x2 - 2)} {_num(y2)}"
    marker = "plan-arrow-critical" if critical else "plan-arrow"
    return (
        f'<path d="{d}" class="edge{" critical" if critical else ""}" marker-end="url(#{marker})"/>'
    )


def _node(node: dict, at: tuple, critical: bool) -> str:
    x, y = at
    classes = ["node", f"state-{node['state']}"]
    if critical:
        classes.append("critical")
    if node["in_cycle"]:
        classes.append("cycle")
    title = node["title"]
    short = title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1].rstrip() + "…"
    hours = "" if node["weight_hours"] is None else f" · {node['weight_hours']} h"
    # The link's name is its <title>, the hover text too: it starts with the node's visible
    # text in reading order (WCAG 2.5.3, Label in Name: a speech user says what they see),
    # then the full title and what only the colours and lines show.
    state = node["state"].replace("_", " ")
    hover = f"{node['key']} {state}{hours} {short}"
    if short != title:
        hover += f" ({title})"
    if critical:
        hover += "; on the critical path"
    if node["blocked_by"]:
        hover += f"; waits for {', '.join(node['blocked_by'])}"
    if node["in_cycle"]:
        hover += "; in a cycle: cannot be claimed"
    return (
        f'<a href="{escape(node["url"])}" class="{" ".join(classes)}"'
        f' data-key="{escape(node["key"])}">'
        f"<title>{escape(hover)}</title>"
        f'<rect x="{_num(x)}" y="{_num(y)}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
        f'<text x="{_num(x + 10)}" y="{_num(y + 18)}" class="key">{escape(node["key"])}</text>'
        f'<text x="{_num(x + NODE_W - 10)}" y="{_num(y + 18)}" class="state"'
        f' text-anchor="end">{escape(state)}{escape(hours)}</text>'
        f'<text x="{_num(x + 10)}" y="{_num(y + 37)}" class="title">{escape(short)}</text>'
        "</a>"
    )


def table_rows(plan: dict) -> SafeString:
    """The rows of the page's table of tasks, the graph's text alternative: built here
    rather than in the template, where 500 rows cost several times as much to render."""
    rows = []
    for node in plan["nodes"]:
        key, state = escape(node["key"]), escape(node["state"])
        labels = "".join(f'<span class="pill">{escape(label)}</span> ' for label in node["labels"])
        hours = "—" if node["weight_hours"] is None else node["weight_hours"]
        cycle = ' <span class="badge bad">in a cycle</span>' if node["in_cycle"] else ""
        on_path = ' class="on-path"' if node["on_critical_path"] else ""
        rows.append(
            f'<tr id="node-{key}"{on_path}>'
            f'<td><a href="{escape(node["url"])}" class="mono">{key}</a> {escape(node["title"])}</td>'
            f'<td><span class="badge state-{state}">{state}</span>{cycle}</td>'
            f"<td>{labels}</td>"
            f'<td class="num" title="{escape(node["weight_basis"])}">{hours}</td>'
            f'<td class="mono">{escape(", ".join(node["blocked_by"]))}</td>'
            f"<td>{'yes' if node['on_critical_path'] else ''}</td></tr>"
        )
    # Safe: every text and attribute value above is escaped or a number.
    return mark_safe("".join(rows))


def _num(x: float) -> str:
    return f"{x:.1f}".removesuffix(".0")
