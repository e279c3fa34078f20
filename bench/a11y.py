"""axe-core's WCAG 2.0/2.1 A+AA and 2.2 AA violations on every page of the demo site, for each
role, and what reaches past the right edge at a 360-pixel-wide viewport.

    uv run python bench/a11y.py [--limit 60] [--out before.json]

Seeds the demo (``manage.py seed_demo``) into a SQLite database of its own in a temporary
directory, serves it through ASGI (uvicorn) on a free loopback port, logs in as each demo user
and walks every link of the site's pages (the API, the admin and logout left out) in Debian's
Chromium. Each page is checked at 1,400 pixels (axe) and at 360 (the page's width and the
elements past the edge, tests/ui/a11y.py). Prints JSON: per page (route and address) and
role, the violations by rule and the widths; and a summary per route.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from urllib.parse import urljoin, urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ui.a11y import axe_violations, overflow  # noqa: E402

USERS = ["maria", "rita", "ada", "vera"]
PASSWORD = "factory-demo"
SKIP = ("/admin/", "/api/", "/logout/", "/static/", "/media/", "/metrics", "/hooks/")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(tmp: Path):
    env = {
        **os.environ,
        "DEBUG": "1",
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "MEDIA_ROOT": str(tmp / "media"),
        "STATIC_ROOT": str(tmp / "static"),
    }
    manage = [sys.executable, "manage.py"]
    for command in (["migrate", "--no-input", "-v0"], ["seed_demo"]):
        subprocess.run(manage + command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "factory_site.asgi:application", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{url}/login/", timeout=1)
            return server, url
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the demo site did not start")


def route_of(path: str) -> str:
    import django
    from django.urls import Resolver404, resolve

    if not getattr(route_of, "ready", False):
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
        os.environ.setdefault("DEBUG", "1")
        django.setup()
        route_of.ready = True
    try:
        return resolve(path).url_name or path
    except Resolver404:
        return path


def check(page) -> dict:
    page.set_viewport_size({"width": 1400, "height": 900})
    violations = axe_violations(page)
    page.set_viewport_size({"width": 360, "height": 800})
    narrow = overflow(page)
    page.set_viewport_size({"width": 1400, "height": 900})
    return {
        "violations": {v["rule"]: len(v["nodes"]) for v in violations},
        "width_at_360": narrow["page_width"],
        "past_right_edge_at_360": len(narrow["past"]),
    }


def walk(page, base: str, limit: int) -> dict:
    """Breadth first over the site's links from the start page, each address once."""
    seen, queue, results = set(), ["/"], {}
    while queue and len(results) < limit:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        response = page.goto(base + path)
        if response is None or response.status != 200:
            continue
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        here = urlparse(page.url).path
        results[here] = check(page)
        for href in page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)"):
            link = urlparse(urljoin(page.url, href))
            same_site = link.netloc == urlparse(base).netloc
            if same_site and not link.path.startswith(SKIP) and link.path not in seen:
                queue.append(link.path)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=60, help="pages per role")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    tmp = Path(tempfile.mkdtemp(prefix="bench-a11y-"))
    server, base = serve(tmp)
    report = {"axe_tags": None, "pages": {}, "by_route": {}}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=chromium,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            page = browser.new_page()
            page.goto(f"{base}/login/")
            report["pages"]["anonymous"] = {"/login/": check(page)}
            for user in USERS:
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.goto(f"{base}/login/")
                page.fill("#id_username", user)
                page.fill("#id_password", PASSWORD)
                page.click("button[type=submit]")
                page.wait_for_load_state()
                report["pages"][user] = walk(page, base, args.limit)
                context.close()
            browser.close()
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    from tests.ui.a11y import TAGS

    report["axe_tags"] = TAGS
    by_route = defaultdict(
        lambda: {"visits": 0, "violations": 0, "by_rule": defaultdict(int), "widths_360": set()}
    )
    for pages in report["pages"].values():
        for path, result in pages.items():
            entry = by_route[route_of(path)]
            entry["visits"] += 1
            for rule, count in result["violations"].items():
                entry["by_rule"][rule] = max(entry["by_rule"][rule], count)
            entry["violations"] = max(entry["violations"], sum(result["violations"].values()))
            entry["widths_360"].add(result["width_at_360"])
            entry.setdefault("max_past_edge_360", 0)
            entry["max_past_edge_360"] = max(
                entry["max_past_edge_360"], result["past_right_edge_at_360"]
            )
    report["by_route"] = {
        route: {
            "visits": e["visits"],
            "max_violations": e["violations"],
            "max_by_rule": dict(e["by_rule"]),
            "widths_at_360": sorted(e["widths_360"]),
            "max_past_edge_360": e["max_past_edge_360"],
        }
        for route, e in sorted(by_route.items())
    }
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
