"""Which browser test checks each page of the site, and why the other addresses are no pages.

Every address in the URL configuration outside the API and the admin is named here once:
in PAGES with the browser tests that load it (tests/ui/conftest.py fails such a test that
did not check the page with axe-core), or in NOT_PAGES with the reason it is no page.
tests/ui/test_routes.py fails on an address in neither, so a page added later cannot be
left unchecked. To add a page: visit it in a browser test and name that test here.
"""

from django.urls import URLPattern, URLResolver, get_resolver

PAGES = {
    "login": ("test_a_visitor_logs_in_after_a_wrong_password",),
    "review-queue": (
        "test_a_reviewer_walks_the_review_by_keyboard_alone",
        "test_the_review_queue_fills_and_empties_as_submissions_and_reviews_land",
    ),
    "task-board": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "task-detail": (
        "test_a_manager_reads_every_page_on_a_bad_day",
        "test_a_reviewer_walks_the_review_by_keyboard_alone",
        "test_an_agent_reads_its_work_and_a_returned_landing",
    ),
    "dashboard": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "plan-index": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "plan": ("test_a_manager_reads_the_plan_and_follows_a_task",),
    "landing-index": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "landing": (
        "test_a_manager_reads_every_page_on_a_bad_day",
        "test_an_agent_reads_its_work_and_a_returned_landing",
    ),
    "evidence-detail": ("test_a_reviewer_walks_the_review_by_keyboard_alone",),
    "tokens": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "decision-log": (
        "test_a_manager_searches_the_decision_log_and_follows_the_supersession_chain",
    ),
    "decision-detail": (
        "test_a_manager_searches_the_decision_log_and_follows_the_supersession_chain",
    ),
    "spec-detail": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "webhooks-index": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "webhooks": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "webhook": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "imports-index": ("test_a_manager_reads_every_page_on_a_bad_day",),
    "imports": ("test_a_manager_checks_an_adr_folder_then_applies_it",),
    "import-detail": ("test_a_manager_checks_an_adr_folder_then_applies_it",),
}

NOT_PAGES = {
    "home": "redirects to the role's first page",
    "logout": "POST only: logs out and redirects",
    "metrics": "Prometheus text for the operator's scraper",
    "hooks-github": "GitHub's webhook deliveries (JSON)",
    "api-schema": "the OpenAPI document (YAML/JSON)",
    "api-docs": "Swagger UI's page, drawn by Swagger UI's own script (left out: docs/accessibility.md)",
    "task-gates": "a fragment of task-detail, refreshed into it by htmx: checked inside it",
    "task-review": "POST only: approve or reject, then a redirect",
    "task-comment": "POST only: a line comment, then a redirect",
    "task-comment-resolve": "POST only: resolves a comment, then a redirect",
    "task-action": "POST only: a manager's action, then a redirect",
    "landing-retry": "POST only: wakes the lander, then a redirect",
    "landing-pause": "POST only: pauses landing, then a redirect",
    "landing-resume": "POST only: resumes landing, then a redirect",
    "landing-dequeue": "POST only: takes a task out of the queue, then a redirect",
    "landing-fast": "POST only: puts a queued change in the fast lane, then a redirect",
    "landing-flaky": "POST only: quarantines or releases a test, then a redirect",
    "landing-revert": "POST only: queues the revert of a landed change, then a redirect",
    "landing-revert-cancel": "POST only: takes back a queued revert, then a redirect",
    "evidence-image": "a screenshot's bytes, shown inside evidence-detail and task-detail",
    "token-revoke": "POST only: revokes a token, then a redirect",
    "decision-verdict": "POST only: accepts or rejects a decision, then a redirect",
    "import-apply": "POST only: applies a checked import, then a redirect",
    "oidc_authentication_init": "redirects to the identity provider (single sign-on, when on)",
    "oidc_authentication_callback": "the identity provider's redirect back: logs in, redirects",
}


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.name


def site_routes() -> dict[str, str]:
    """Name → address of every route outside the API and the admin, the single sign-on ones
    too (they are in the URL configuration only when it is switched on)."""
    from projects.urls import sso_patterns

    routes = list(_walk(get_resolver().url_patterns)) + list(_walk(sso_patterns))
    return {
        name or f"(unnamed) {route}": route
        for route, name in routes
        if not route.startswith(("admin/", "api/v1/"))
    }
