"""What the pages are checked for: axe-core's WCAG rules and nothing past the right edge.

Shared by the browser tests (tests/ui/conftest.py runs it on every page they load) and by
bench/a11y.py (which measures the demo site with it). axe-core is vendored beside this file
(vendor/axe-core/SOURCE says where from); it is evaluated in the page through the DevTools
protocol, so the site's CSP, which allows no script of this kind, stays as it is.
"""

from pathlib import Path

AXE_JS = (Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js").read_text()

# WCAG 2.0 and 2.1, levels A and AA, and 2.2's AA rules (target-size is the one in axe 4).
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]

RUN = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: tags},
                                          resultTypes: ["violations"]});
  return result.violations.map(v => ({
    rule: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({target: n.target.join(" "), html: n.html.slice(0, 160)})),
  }));
}"""

# Elements whose box reaches past the viewport's right edge, except inside a container that
# scrolls sideways by itself (overflow-x auto or scroll). A container that hides its overflow
# does not excuse its content: the reader still loses what is cut off.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const scrolls = (el) => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const x = getComputedStyle(p).overflowX;
      if ((x === "auto" || x === "scroll") && p !== document.documentElement
          && p !== document.body) return true;
    }
    return false;
  };
  const past = [];
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    if (box.right > width + 0.5 && !scrolls(el)) {
      const id = el.id ? "#" + el.id : "";
      const cls = el.classList.length ? "." + [...el.classList].join(".") : "";
      past.push(el.tagName.toLowerCase() + id + cls);
    }
  }
  return {page_width: document.documentElement.scrollWidth, viewport: width, past: past};
}"""


def axe_violations(page) -> list[dict]:
    """axe-core's violations of TAGS on the page as it stands, rule by rule."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_JS)
    return page.evaluate(RUN, TAGS)


def overflow(page) -> dict:
    """The page's width, the viewport's, and the elements past the viewport's right edge."""
    return page.evaluate(OVERFLOW)


def describe(violations: list[dict]) -> str:
    """One line per offending element: the rule, what it asks, and the element."""
    return "\n".join(
        f"  {v['rule']} ({v['help']}): {n['target']}  {n['html']}"
        for v in violations
        for n in v["nodes"]
    )
