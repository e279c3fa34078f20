"""What the pages are checked for: axe-core's WCAG rules and nothing past the right edge.

Shared by the browser tests (tests/ui/conftest.py runs it on every page they load) and by
bench/a11y.py (which measures the demo site with it). axe-core is vendored beside this file
(vendor/axe-core/SOURCE says where from); it is evaluated in the page through the DevTools
protocol, so the site's CSP, which allows no script of this kind, stays as it is.
"""

import hashlib
import re
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
  // Text runs past the edge without its element doing so: the page itself is then wider.
  const page = document.documentElement.scrollWidth;
  if (page > width && past.length === 0) past.push(`text (the page is ${page} px wide)`);
  return {page_width: page, viewport: width, past: past};
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


# Pages that passed in this process, by a hash of their markup without the CSRF token.
PASSED: set[str] = set()
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="[^"]*"')

# The widths every page is laid out at: a phone, a tablet, the tests' own desktop window.
WIDTHS = (360, 768, 1400)


def route_name(url: str) -> str | None:
    """The URLconf name of the page at ``url``, None for anything the site did not route."""
    from urllib.parse import urlparse

    from django.urls import Resolver404, resolve

    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        return None
    try:
        return resolve(parsed.path).url_name
    except Resolver404:
        return None


class PageChecker:
    """Checks each page a browser test loads, once, before the test next acts on it.

    A load only marks the page as due: the check runs before the test's next action (or at
    its end), so it sees the page the test saw, after the test waited for what it needed.
    It runs axe at 1,400 and 360 pixels and looks for anything past the right edge at each of
    WIDTHS, then puts the window back as it was. A violation fails the test at once, naming
    the page, the rule and the element.
    """

    def __init__(self, page, skip=frozenset()):
        self.page = page
        self.skip = skip  # routes that are no page of ours (tests/ui/routes.py, NOT_PAGES)
        self.due = False
        self.checked: list[str] = []  # route names, one per checked load
        page.on("load", self._loaded)

    def _loaded(self, _page):
        self.due = True

    def check(self):
        if not self.due or self.page.is_closed():
            return
        self.due = False
        route = route_name(self.page.url)
        if (
            route is None
            or route in self.skip
            or self.page.evaluate("document.contentType") != "text/html"
        ):
            return
        # A page the session checked already, byte for byte (its CSRF token aside), passed
        # then: the same markup and styles give the same results.
        html = CSRF.sub("", self.page.evaluate("document.documentElement.outerHTML"))
        seen = hashlib.sha256(html.encode()).hexdigest()
        if seen in PASSED:
            self.checked.append(route)
            return
        window = self.page.viewport_size
        problems = []
        try:
            for width in sorted(WIDTHS, reverse=True):
                self.page.set_viewport_size({"width": width, "height": window["height"]})
                if width in (max(WIDTHS), min(WIDTHS)):
                    found = axe_violations(self.page)
                    if found:
                        problems.append(f"axe at {width} px:\n{describe(found)}")
                wide = overflow(self.page)
                if wide["past"]:
                    problems.append(
                        f"at {width} px the page is {wide['page_width']} px wide;"
                        f" past the right edge: {', '.join(wide['past'][:12])}"
                    )
        finally:
            self.page.set_viewport_size(window)
        self.checked.append(route)
        if not problems:
            PASSED.add(seen)
        if problems:
            raise AssertionError(f"{route} ({self.page.url}):\n" + "\n".join(problems))
