"""Every number a request carries is read by one helper that takes ASCII digits only.

The walk below requests every page and every API endpoint of the URL configuration (found
by resolving it, so a new page is walked without being listed) with hostile numbers in
each numeric query parameter and in each id of the path: "²" (a digit to ``isdigit``, an
error to ``int``), "٣" and the full-width 3 (which ``int`` reads as 3), signs, spaces,
fractions and numbers too long for the database. None of it may be a 500.

Each route is walked exhaustively in the numeric parameters it reads, found by watching
its request's query string (``ReadingQueryDict``); the others, which it must ignore, it
gets together, once per hostile value. The world is built once for the module.
"""

import random
import re
from decimal import Decimal

import pytest
from django.core.handlers import wsgi
from django.http import QueryDict
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern
from knox.models import AuthToken

from decisions import services as decision_services
from events import services as events_services
from interop import services as interop_services
from projects.numbers import usd, usd_pattern, usd_pattern_at_most, usd_text, whole_number
from tasks.models import LineComment
from tests.conftest import module_media, world_for_the_module
from tests.factories import CRITERIA, Flow, ProjectFactory
from tests.hostile.world import BEADS_LINE

# "9" * 5000: past 4,300 digits ``int`` itself refuses to read a number (a ValueError).
HOSTILE = ["²", "٣", "\uff13", "-1", "+1", " 1", "1.5", "1e3", "", "0x10", "9" * 19, "9" * 40]
HOSTILE += ["9" * 5000, "0" * 5000 + "1"]
NUMERIC_PARAMS = ["attempt", "v", "a", "b", "page", "page_size", "max_chars", "seed", "weeks"]
API_STRICT = {
    "page_size",
    "max_chars",
    "seed",
    "weeks",
}  # the API refuses these with 400; pages ignore theirs


# Any access to the whole query string (a copy, a loop, its length) reads every parameter.
EVERY = "*"
READ: set = set()


class ReadingQueryDict(QueryDict):
    """``request.GET`` that notes in ``READ`` each parameter the view looks up."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._watching = True  # QueryDict's own __init__ looks keys up: those are not reads

    def _note(self, key):
        if getattr(self, "_watching", False):
            READ.add(key)

    def __getitem__(self, key):  # get() and templates' lookups come here too
        self._note(key)
        return super().__getitem__(key)

    def _getlist(self, key, *args, **kwargs):  # getlist()
        self._note(key)
        return super()._getlist(key, *args, **kwargs)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

    def __iter__(self):  # items(), values(), dict()
        self._note(EVERY)
        return super().__iter__()

    def __len__(self):
        self._note(EVERY)
        return super().__len__()

    def keys(self):
        self._note(EVERY)
        return super().keys()

    def lists(self):  # urlencode()
        self._note(EVERY)
        return super().lists()

    def __copy__(self):
        self._note(EVERY)
        return super().__copy__()

    def __deepcopy__(self, memo):  # copy()
        self._note(EVERY)
        return super().__deepcopy__(memo)


@pytest.fixture
def watched(monkeypatch):
    """``READ`` fills with the query parameters each request's view reads."""
    monkeypatch.setattr(wsgi, "QueryDict", ReadingQueryDict)
    READ.clear()
    yield READ
    READ.clear()


def routes(resolver=None, prefix=""):
    """Every route of the site as a template string, e.g. "api/v1/tasks/<key:key>/"."""
    for entry in (resolver or get_resolver()).url_patterns:
        pattern = entry.pattern
        if not isinstance(pattern, RoutePattern):
            continue  # the admin's regex routes have their own tests
        if isinstance(entry, URLResolver):
            if str(pattern) == "admin/":
                continue
            yield from routes(entry, prefix + str(pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(pattern)


def build_world() -> dict:
    flow = Flow(ProjectFactory(slug="FM"))
    subscription = events_services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )
    spec = flow.spec(criteria=CRITERIA)
    task, attempt = flow.claimed(spec=spec)
    evidence = flow.attach(attempt, b"log\n")
    decision_services.decision_propose(
        project=flow.project, actor=flow.reviewer, title="T", context="C", decision="D"
    )
    flow.manager_token = AuthToken.objects.create(user=flow.manager)[1]
    comment = LineComment(pk=1)  # a path parameter only: no page needs it to exist
    return {
        "task": task.key,
        "spec": spec.key,
        "decision": "FM-D1",
        "project": "FM",
        "attempt": attempt.pk,
        "evidence": evidence.pk,
        "subscription": subscription.pk,
        "delivery": subscription.deliveries.first().pk,
        "comment": comment.pk,
        "import_run": interop_services.import_check(
            project=flow.project,
            actor=flow.manager,
            format="beads",
            name="i.jsonl",
            data=BEADS_LINE,
        ).pk,
        "flow": flow,
    }


@pytest.fixture(scope="module")
def _isolated_media(tmp_path_factory):
    """One media folder for the module: the world's evidence file outlives a test."""
    with module_media(tmp_path_factory):
        yield


@pytest.fixture(scope="module")
def _world(django_db_setup, django_db_blocker, _isolated_media):
    with world_for_the_module(django_db_blocker, build_world) as world:
        yield world


@pytest.fixture
def world(db, _world):
    """Built once for the module; every test (in a transaction of its own: ``db``) is
    rolled back to it."""
    return _world


def fill(route: str, world, number=None) -> str:
    """The route with real keys and ids; ``number`` replaces every id when given."""
    kind = route.removeprefix("api/v1/").split("/")[0]
    key = {
        "tasks": world["task"],
        "specs": world["spec"],
        "decisions": world["decision"],
        "projects": world["project"],
    }.get(kind, "")
    ids = {
        "attempt_id": world["attempt"],
        "evidence_id": world["evidence"],
        "number": 1,
        "pk": world["subscription"],
        "comment_id": world["comment"],
        "delivery": world["delivery"],
        "run_id": world["import_run"],
        "host_id": 583231,  # a path parameter only: the route takes no GET
    }
    path = route.replace("<key:key>", key).replace("<key:slug>", key)
    for name, value in ids.items():
        path = path.replace(f"<id:{name}>", str(value if number is None else number))
    return "/" + (
        path.replace("<str:action>", "publish")
        .replace("<str:verdict>", "accept")
        .replace("<str:export_format>", "beads")
    )


@pytest.fixture
def callers(client, world):
    from rest_framework.test import APIClient

    flow = world["flow"]
    client.force_login(flow.manager)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {flow.manager_token}")
    return {"page": client, "api": api}


def get(callers, path, **params):
    caller = callers["api"] if path.startswith("/api/") else callers["page"]
    return caller.get(path, params)


@pytest.mark.django_db
def test_every_route_of_the_site_is_walked(world):
    walked = {fill(route, world) for route in routes()}

    assert {"/tasks/FM-1/", "/specs/FM-S1/", "/api/v1/tasks/FM-1/context/"} <= walked
    assert not [path for path in walked if "<" in path]


def parameters_read(callers, path, watched) -> list[str]:
    """The numeric parameters the route reads, absent or all given (a view may read one
    only when another is there)."""
    watched.clear()
    get(callers, path)
    get(callers, path, **dict.fromkeys(NUMERIC_PARAMS, "1"))
    return [name for name in NUMERIC_PARAMS if {name, EVERY} & watched]


def answer_to(callers, path, baseline, params) -> tuple | None:
    """``params`` and the unexpected status, or None when the status is the one expected."""
    if not params:
        return None  # the route reads every parameter: none is left to ignore
    status = get(callers, path, **params).status_code
    strict = path.startswith("/api/") and API_STRICT & set(params)
    # A page ignores a malformed number; the API refuses the ones it reads.
    expected = {baseline, 400} if strict else {baseline}
    return None if status in expected else (path, params, baseline, status)


@pytest.mark.django_db
@pytest.mark.parametrize("route", list(routes()), ids=lambda route: "/" + route)
def test_hostile_numbers_in_query_parameters_never_fail_a_page_or_endpoint(
    world, callers, watched, route
):
    path = fill(route, world)
    baseline = get(callers, path).status_code
    read = parameters_read(callers, path, watched)
    ignored = [name for name in NUMERIC_PARAMS if name not in read]

    watched.clear()
    answers = [answer_to(callers, path, baseline, {name: v}) for name in read for v in HOSTILE]
    # Every hostile value, in every parameter the route does not read, changes nothing.
    answers += [answer_to(callers, path, baseline, dict.fromkeys(ignored, v)) for v in HOSTILE]

    assert [answer for answer in answers if answer] == []
    assert [name for name in ignored if {name, EVERY} & watched] == [], "read after all"


@pytest.mark.django_db
def test_hostile_numbers_in_the_path_are_404(world, callers):
    failures = []
    for route in [r for r in routes() if "<id:" in r]:
        for value in ["²", "٣", "\uff13", "-1", "9" * 19, "9" * 40]:
            path = fill(route, world, number=value)
            status = get(callers, path).status_code
            if status != 404:
                failures.append((path, status))

    assert failures == []


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["²", "٣", "\uff13"])
def test_the_task_page_ignores_a_non_ascii_attempt_number(world, callers, value):
    response = get(callers, f"/tasks/{world['task']}/", attempt=value)

    assert (response.status_code, response.context["material"].attempt.number) == (200, 1)


@pytest.mark.django_db
def test_the_api_names_a_non_ascii_budget_in_its_400(world, callers):
    response = get(callers, f"/api/v1/tasks/{world['task']}/context/", max_chars="٣")

    assert (response.status_code, response.json()["fields"]) == (
        400,
        {"max_chars": ["must be a whole number from 1, given once"]},
    )


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("7", 7),
        ("007", 7),
        ("9" * 18, 10**18 - 1),
        ("9" * 19, None),  # every number from a request fits a bigint
        ("9" * 5000, None),
        ("0" * 5000 + "1", None),
        ("²", None),
        ("٣", None),
        ("\uff13", None),
        ("-1", None),
        (" 1", None),
        ("", None),
        (None, None),
    ],
)
def test_whole_number_takes_ascii_digits_only(text, number):
    assert whole_number(text) == number


@pytest.mark.parametrize(
    ("value", "amount"),
    [
        ("0.1", Decimal("0.100000")),
        (0.1, Decimal("0.100000")),
        (3, Decimal("3.000000")),
        ("999999.9999999", Decimal("999999.999999")),  # cut, never rounded up past the digits
        (1e-7, Decimal("0.000000")),
        (Decimal("12.5"), Decimal("12.500000")),
        ("1000000", None),
        (1_000_000, None),
        (999_999.5, None),
        ("-1", None),
        (-0.5, None),
        ("1e3", None),
        (" 1", None),
        ("٣", None),
        ("", None),
        (True, None),
        (float("nan"), None),
        (float("inf"), None),
        (Decimal("NaN"), None),
        (None, None),
        ([1], None),
    ],
)
def test_usd_reads_digits_or_numbers_and_cuts_to_the_places(value, amount):
    assert usd(value, places=6, digits=6) == amount


@pytest.mark.parametrize(
    ("amount", "text"),
    [(Decimal("12.5"), "12.50"), (Decimal("0.000300"), "0.0003"), (Decimal("7"), "7.00")],
)
def test_usd_text_shows_cents_and_no_trailing_zeros_past_them(amount, text):
    assert usd_text(amount) == text


@pytest.mark.parametrize(
    ("text", "taken"),
    [
        ("0", True),
        ("000000", True),
        ("99.999999999", True),
        ("0099", True),
        ("100", True),
        ("000100", True),
        ("100.00000000000000000000", True),
        ("100.0000001", False),  # above, however little: the limit is compared before cutting
        ("100.5", False),
        ("101", False),
        ("0000100", False),  # seven digits: not an amount usd takes at all
        ("999999", False),
        ("1e2", False),
        ("-1", False),
        (".5", False),
    ],
)
def test_the_pattern_at_most_a_limit_takes_the_amounts_up_to_it(text, taken):
    pattern = re.compile(usd_pattern_at_most(100, 6))

    assert bool(pattern.fullmatch(text)) is taken


@pytest.mark.parametrize("limit", [0, 1, 7, 10, 99, 100, 250, 909_090, 999_999])
def test_the_pattern_at_most_a_limit_agrees_with_usd_on_every_kind_of_amount(limit):
    pattern, amounts = re.compile(usd_pattern_at_most(limit, 6)), re.compile(usd_pattern(6))
    shapes = random.Random(limit)
    texts = [str(limit), f"0{limit}", f"{limit}.0", f"{limit}.01", str(limit + 1), str(limit - 1)]
    for _ in range(3000):
        whole = "".join(shapes.choice("0012345679") for _ in range(shapes.randint(1, 7)))
        fraction = "".join(shapes.choice("00123456789") for _ in range(shapes.randint(1, 21)))
        texts += [whole, f"{whole}.{fraction}"]

    def small_enough(text):
        return bool(amounts.fullmatch(text) and Decimal(text) <= limit)

    wrong = [text for text in texts if bool(pattern.fullmatch(text)) != small_enough(text)]

    assert wrong == []
