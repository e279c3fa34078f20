"""Hostile text rendered by every page: DESIGN.md promises "rendered evidence is escaped".

Every text field of the API is filled with script, through the API, as agents and people
would, and every page is scanned for anything a browser would run. Apart from
tests/hostile/test_inputs_*.py, whose world is built once per module: these build their own.
"""

import json
from html import unescape
from html.parser import HTMLParser
from urllib.parse import unquote_plus, urlencode
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

import pytest

from evidence.models import Evidence
from tasks.models import Attempt
from tests.factories import Flow, ProjectFactory
from tests.hostile.world import IMG, PNG, SCRIPT, XSS, post_upload, upload_body

# --- Hostile text in every page -----------------------------------------------------------------

JUNIT_XSS = (
    f"<testsuite name={quoteattr(XSS)} tests='2'>"
    f"<testcase classname={quoteattr('tests.test_x.' + XSS)} name={quoteattr(XSS)} time='0.1'>"
    f"<failure message={quoteattr(XSS)}>{xml_escape(XSS)}</failure></testcase>"
    "<testcase classname='tests.test_x' name='test_ok'/></testsuite>"
).encode()
DIFF_XSS = (
    f"--- a/src/{XSS}.py\n+++ b/src/{XSS}.py\n@@ -1 +1 @@ {XSS}\n-old {XSS}\n+new {XSS}\n"
    f"--- a/evil/{IMG}.py\n+++ b/evil/{IMG}.py\n@@ -1 +1 @@\n-a\n+b {IMG}\n"
).encode()
LOG_XSS = (
    f"\x1b[31m{XSS}\x1b[0m\nsee javascript:alert(1)\n\x1b]8;;javascript:alert(1)\x07link\n".encode()
)


def ok(response) -> dict:
    """The JSON of a 2xx answer: the API accepted the hostile text where it is valid."""
    assert 200 <= response.status_code < 300, response.content[:500]
    return response.json()


class XssWorld:
    """Every text field of the API filled with script, through the API, as agents and people would."""

    def __init__(self, api, capture):
        flow = self.flow = Flow(ProjectFactory(slug="FM"), prefix="fm")
        manager, agent, agent2, reviewer = (
            api(flow.manager),
            api(flow.agent),
            api(flow.agent2),
            api(flow.reviewer),
        )
        criteria = [
            {"key": "AC-1", "text": XSS, "proof": {"check": "tests", "select": f"tests/{XSS}::*"}},
            {"key": "AC-2", "text": XSS, "proof": {"check": "evidence", "kind": "log"}},
            {"key": "AC-3", "text": XSS, "proof": {"check": "review"}},
        ]
        body = (
            f"# {XSS}\n\n{XSS}\n\n[click](javascript:alert(1)) "
            f'<a href="javascript:alert(1)">y</a> <a href="  JaVaScRiPt:alert(1)">z</a>\n'
        )
        spec = ok(
            manager.post(
                "/api/v1/specs/",
                {"project": "FM", "title": XSS, "body": body, "criteria": criteria},
                format="json",
            )
        )
        self.spec = spec["key"]
        ok(manager.post(f"/api/v1/specs/{self.spec}/versions/1/accept/", {"reason": XSS}, "json"))
        ok(
            manager.post(
                f"/api/v1/specs/{self.spec}/versions/",
                {"body": f"v2 {XSS}\n", "criteria": [{**c, "text": f"v2 {XSS}"} for c in criteria]},
                format="json",
            )
        )
        self.task = ok(
            manager.post(
                "/api/v1/tasks/",
                {
                    "project": "FM",
                    "title": XSS,
                    "description": XSS,
                    "spec": self.spec,
                    "priority": 10,
                    "allowed_paths": ["src/**", f"docs/{IMG}"],
                },
                format="json",
            )
        )["key"]
        self.task2 = ok(
            manager.post(
                "/api/v1/tasks/",
                {"project": "FM", "title": f"2 {XSS}", "description": XSS},
                format="json",
            )
        )["key"]
        for key in (self.task, self.task2):
            ok(manager.post(f"/api/v1/tasks/{key}/publish/", {"reason": XSS}, format="json"))
        ok(manager.patch("/api/v1/projects/FM/", {"gate_policy": {"diff-scope": {}}}, "json"))

        # Attempt 1: everything an agent can write, then the diff-scope gate fails on a path.
        first = ok(agent.post("/api/v1/tasks/claim/", {"project": "FM"}, format="json"))
        assert first["task"]["key"] == self.task
        attempt = first["attempt"]["id"]
        ok(
            agent.put(
                f"/api/v1/attempts/{attempt}/checkpoint/",
                {"data": {"note": XSS, XSS: [XSS]}, "revision": 0},
                format="json",
            )
        )
        self.agent_decision = ok(
            agent.post(
                f"/api/v1/attempts/{attempt}/decisions/",
                {
                    "title": XSS,
                    "context": XSS,
                    "decision": XSS,
                    "consequences": XSS,
                    "alternatives": [{"option": XSS, "reason": XSS}],
                },
                format="json",
            )
        )["key"]
        uploads = [
            ("log", LOG_XSS, f"{IMG}.log", "AC-2"),
            ("junit", JUNIT_XSS, f"{IMG}.xml", "AC-1"),
            ("diff", DIFF_XSS, f"{IMG}.diff", ""),
            ("note", f"# {XSS}\n{XSS}\n".encode(), f"{IMG}.md", "AC-3"),
            ("json", json.dumps({XSS: XSS, "k": [XSS]}).encode(), f"{IMG}.json", ""),
            ("link", f"https://example.com/?q={XSS}".encode(), f"{IMG}.url", ""),
            ("screenshot", PNG, f"{IMG}.png", "AC-2"),
        ]
        for kind, content, name, proves in uploads:
            ok(
                post_upload(
                    agent,
                    attempt,
                    upload_body(kind, content, name, "application/octet-stream", criteria=proves),
                )
            )
        with capture(execute=True):
            ok(
                agent.post(
                    f"/api/v1/attempts/{attempt}/submit/",
                    {"summary": XSS, "change": {"branch": XSS, "url": "https://example.com/x"}},
                    format="json",
                )
            )

        # Attempt 2: no gates, so it reaches review; the reviewer rejects with a hostile reason.
        ok(manager.patch("/api/v1/projects/FM/", {"gate_policy": {}}, format="json"))
        second = ok(agent.post("/api/v1/tasks/claim/", {"project": "FM"}, format="json"))
        assert second["task"]["key"] == self.task
        attempt = second["attempt"]["id"]
        ok(post_upload(agent, attempt, upload_body("diff", DIFF_XSS, "c.diff")))
        with capture(execute=True):
            ok(agent.post(f"/api/v1/attempts/{attempt}/submit/", {"summary": XSS}, format="json"))
        ok(
            reviewer.post(
                f"/api/v1/tasks/{self.task}/review/",
                {"verdict": "reject", "reason": XSS},
                format="json",
            )
        )

        # Attempt 3 waits in the review queue.
        third = ok(agent.post("/api/v1/tasks/claim/", {"project": "FM"}, format="json"))
        assert third["task"]["key"] == self.task
        with capture(execute=True):
            ok(
                agent.post(
                    f"/api/v1/attempts/{third['attempt']['id']}/submit/",
                    {"summary": XSS},
                    format="json",
                )
            )

        # The other task is blocked by its agent with a hostile reason.
        held = ok(agent2.post("/api/v1/tasks/claim/", {"project": "FM"}, format="json"))
        assert held["task"]["key"] == self.task2
        ok(
            agent2.post(
                f"/api/v1/attempts/{held['attempt']['id']}/release/",
                {"reason": XSS, "blocked": True},
                format="json",
            )
        )

        # Decisions: amended and accepted, rejected, superseded; proposed by the reviewer
        # and decided by the manager (nobody decides their own).
        record = {
            "project": "FM",
            "title": XSS,
            "context": XSS,
            "decision": XSS,
            "consequences": XSS,
            "alternatives": [{"option": XSS, "reason": XSS}],
            "tasks": [self.task],
            "specs": [self.spec],
        }
        amending = ok(
            reviewer.post(
                "/api/v1/decisions/",
                {
                    **record,
                    "amendments": [
                        {"spec": self.spec, "body": f"amended {XSS}", "criteria": criteria}
                    ],
                },
                format="json",
            )
        )["key"]
        ok(manager.post(f"/api/v1/decisions/{amending}/accept/", {"reason": XSS}, format="json"))
        rejected = ok(reviewer.post("/api/v1/decisions/", record, format="json"))["key"]
        ok(manager.post(f"/api/v1/decisions/{rejected}/reject/", {"reason": XSS}, format="json"))
        later = ok(
            reviewer.post("/api/v1/decisions/", {**record, "supersedes": [amending]}, format="json")
        )["key"]
        ok(manager.post(f"/api/v1/decisions/{later}/accept/", {"reason": XSS}, format="json"))
        self.decisions = [self.agent_decision, amending, rejected, later]

    def pages(self) -> list[tuple[str, bool]]:
        """Every page that shows the hostile text: ``(url, whether it must show it escaped)``."""
        hostile = urlencode({"q": XSS, "label": XSS, "project": XSS, "state": XSS})
        evidence = Evidence.objects.filter(attempt__task__key=self.task).values_list(
            "pk", flat=True
        )
        urls = [
            "/review/",
            "/tasks/",
            f"/tasks/?{hostile}",
            f"/tasks/{self.task}/",
            f"/tasks/{self.task}/?attempt=1",
            f"/tasks/{self.task}/?attempt=2",
            f"/tasks/{self.task}/?{urlencode({'attempt': XSS})}",
            f"/tasks/{self.task2}/",
            *[f"/evidence/{pk}/" for pk in evidence],
            "/decisions/",
            "/decisions/?q=alert",
            f"/decisions/?{hostile}",
            *[f"/decisions/{key}/" for key in self.decisions],
            f"/specs/{self.spec}/",
            f"/specs/{self.spec}/?v=1",
            f"/specs/{self.spec}/?v=2&a=1&b=3",
            f"/specs/{self.spec}/?{urlencode({'v': XSS, 'a': XSS, 'b': XSS})}",
        ]
        # Scanned too, though they need not show the text: the queue filtered by a project
        # that does not exist is empty, the current attempt ran no gate, the dashboard counts.
        quiet = [f"/review/?{hostile}", f"/tasks/{self.task}/gates/", "/dashboard/"]
        return [(url, True) for url in urls] + [(url, False) for url in quiet]


class PageScan(HTMLParser):
    """What a browser would run: script elements, event-handler attributes, javascript: URLs."""

    URL_ATTRIBUTES = {
        "href",
        "src",
        "action",
        "formaction",
        "xlink:href",
        "data",
        "hx-get",
        "hx-post",
    }

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems = []
        self.in_script = False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}={value!r}>")
            if name in self.URL_ATTRIBUTES and value is not None:
                squeezed = "".join(
                    ch for ch in unescape(value) if ch.isprintable() and not ch.isspace()
                )
                if squeezed.lower().startswith(("javascript:", "vbscript:", "data:text/html")):
                    self.problems.append(f"<{tag} {name}={value!r}>")
        if tag == "script":
            src = dict(attrs).get("src") or ""
            if not src.startswith("/static/"):
                self.problems.append(f"<script {attrs!r}>")
            self.in_script = True

    def handle_endtag(self, tag):
        if tag == "script":
            self.in_script = False

    def handle_data(self, data):
        if self.in_script and data.strip():
            self.problems.append(f"inline script: {data[:80]!r}")


ESCAPED = ("&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;")


def scan(html: str) -> list[str]:
    problems = [f"raw payload {p!r}" for p in (SCRIPT, IMG) if p in html]
    parser = PageScan()
    parser.feed(html)
    return problems + parser.problems


@pytest.mark.parametrize(
    "html",
    [
        f"<p>{SCRIPT}</p>",
        "<p><img src=x onerror=alert(1)></p>",
        '<div onmouseover="x()">a</div>',
        '<a href="javascript:alert(1)">a</a>',
        '<a href=" &#106;avascript:alert(1)">a</a>',
        '<a href="JaVa\tScRiPt:alert(1)">a</a>',
        '<form action="javascript:alert(1)"></form>',
        '<script src="https://evil.example/x.js"></script>',
    ],
)
def test_the_page_scan_finds_what_a_browser_would_run(html):
    """The scanner itself: each of these would run script in a browser."""
    assert scan(html) != []


def test_the_page_scan_passes_escaped_text_and_the_sites_own_scripts():
    html = (
        '<script src="/static/js/app.js" defer></script>'
        f"<p>{ESCAPED[0]}{ESCAPED[1]}</p><a href='/tasks/FM-1/'>x</a>"
    )

    assert scan(html) == []


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["reviewer", "manager"])
def test_script_in_every_text_field_is_escaped_on_every_page(
    api, client, django_capture_on_commit_callbacks, role
):
    world = XssWorld(api, django_capture_on_commit_callbacks)
    client.force_login(getattr(world.flow, role))
    client.raise_request_exception = False
    problems = {}

    for url, shows_text in world.pages():
        response = client.get(url)
        html = response.content.decode()
        found = scan(html) if response.status_code == 200 else [f"status {response.status_code}"]
        # A page that dropped the text would pass the scan trivially: it must show it escaped.
        if shows_text and not any(escaped in html for escaped in ESCAPED):
            found.append("the escaped payload is missing")
        if found:
            problems[unquote_plus(url)[:120]] = found

    assert not problems, "\n".join(f"{url}: {found}" for url, found in problems.items())


@pytest.mark.django_db
def test_the_hostile_payloads_really_reached_the_pages(api, django_capture_on_commit_callbacks):
    """The scan is meaningful only if the gate verdict, evidence names, junit failure and diff
    paths carrying the payload are really stored."""
    world = XssWorld(api, django_capture_on_commit_callbacks)

    names = set(Evidence.objects.filter(provenance="agent").values_list("name", flat=True))
    failing = Evidence.objects.filter(kind="junit").first().summary["failures"][0]
    diff = Evidence.objects.filter(kind="diff").first().summary

    assert f"{IMG}.log" in names
    assert (failing["message"], failing["test"]) == (XSS, f"tests.test_x.{XSS}::{XSS}")
    assert f"evil/{IMG}.py" in diff["paths"]
    gate = Attempt.objects.get(task__key=world.task, number=1).gate_runs.get()
    assert (gate.gate, gate.state) == ("diff-scope", "failed")
    assert IMG in gate.summary
