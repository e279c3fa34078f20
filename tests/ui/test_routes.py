"""Every page of the site has a browser test that checks it with axe-core (tests/ui/routes.py)."""

from tests.ui.routes import NOT_PAGES, PAGES, site_routes


def test_every_route_is_a_checked_page_or_says_why_it_is_none():
    routes = site_routes()

    unlisted = sorted(set(routes) - set(PAGES) - set(NOT_PAGES))

    assert unlisted == [], (
        f"routes with no axe-checked visit: {unlisted}; visit each in a browser test and name "
        "it in tests/ui/routes.py PAGES (or say in NOT_PAGES why it is no page)"
    )


def test_the_table_names_only_routes_that_exist_and_each_once():
    routes = site_routes()

    assert sorted(set(PAGES) - set(routes)) == []
    assert sorted(set(NOT_PAGES) - set(routes)) == []
    assert sorted(set(PAGES) & set(NOT_PAGES)) == []
    assert all(tests for tests in PAGES.values())
