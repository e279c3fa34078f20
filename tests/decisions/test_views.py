"""The review UI's decision log, decision pages, verdict forms and spec pages."""

import re

import pytest

from decisions import services
from decisions.models import Decision
from projects.models import Event
from projects.roles import Role
from tests.factories import CRITERIA, member


def propose(flow, actor=None, **kwargs):
    kwargs.setdefault("title", "Claim with SKIP LOCKED")
    kwargs.setdefault("context", "Two agents must never get the same task.")
    kwargs.setdefault("decision", "Use SELECT ... FOR UPDATE SKIP LOCKED.")
    return services.decision_propose(project=flow.project, actor=actor or proposer(flow), **kwargs)


def proposer(flow):
    """A reviewer who proposes; others decide (nobody decides their own proposal)."""
    return member(flow.project, Role.REVIEWER, f"{flow.project.slug.lower()}-proposer")


def accepted(flow, **kwargs):
    return services.decision_accept(decision=propose(flow, **kwargs), actor=flow.reviewer)


def html(response) -> str:
    return response.content.decode()


def listed(response) -> list[str]:
    return [d.key for d in response.context["page"].object_list]


def chains(page: str) -> list[str]:
    """Each supersession chain on the page, as its keys joined by arrows."""
    return [
        re.sub(r"<[^>]+>|\s", "", chain)
        for chain in re.findall(r'<div class="chain">(.*?)</div>', page, re.S)
    ]


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def state_of(decision) -> str:
    return Decision.objects.get(pk=decision.pk).state


# --- Decision log ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_decision_log_lists_my_projects_decisions_newest_first(client, flow, other_flow):
    for _ in range(3):
        propose(flow)
    propose(other_flow, title="Their secret plan")
    client.force_login(flow.manager)

    response = client.get("/decisions/")

    assert response.status_code == 200
    assert listed(response) == ["FM-D3", "FM-D2", "FM-D1"]
    assert "OT-D1" not in html(response)
    assert "Their secret plan" not in html(response)


@pytest.mark.django_db
def test_decision_log_finds_decisions_by_words(client, flow):
    propose(flow)
    propose(flow, title="Store evidence blobs by checksum")
    propose(flow, title="Use Redis as the Celery broker")
    client.force_login(flow.manager)

    def found(q):
        return listed(client.get("/decisions/", {"q": q}))

    assert found("checksum") == ["FM-D2"]
    assert found("Redis broker") == ["FM-D3"]
    assert found("FM-D1") == ["FM-D1"]
    assert found("zeppelin") == []


@pytest.mark.django_db
def test_decision_log_filters_by_state_spec_and_project(client, flow, other_flow):
    spec = flow.spec()
    accepted(flow)
    propose(flow, specs=[spec])
    rejected = propose(flow)
    services.decision_reject(decision=rejected, actor=flow.reviewer, reason="no")
    propose(other_flow)
    member(other_flow.project, "reviewer", flow.manager.username)
    client.force_login(flow.manager)

    assert listed(client.get("/decisions/?state=accepted")) == ["FM-D1"]
    assert listed(client.get(f"/decisions/?spec={spec.key}")) == ["FM-D2"]
    assert listed(client.get("/decisions/?project=OT")) == ["OT-D1"]
    assert listed(client.get("/decisions/?project=FM&state=rejected")) == ["FM-D3"]


@pytest.mark.django_db
def test_decision_log_shows_the_supersession_chain_both_ways(client, flow):
    old = accepted(flow)
    accepted(flow, title="Claim with advisory locks", supersedes=[old])
    client.force_login(flow.manager)

    response = client.get("/decisions/")

    assert listed(response) == ["FM-D2", "FM-D1"]
    assert chains(html(response)) == ["FM-D1→FM-D2", "FM-D1→FM-D2"]
    assert state_of(old) == "superseded"


@pytest.mark.django_db
def test_decision_log_query_count_does_not_grow(client, flow, django_assert_max_num_queries):
    spec = flow.spec()
    task = flow.draft()

    def decide(previous):
        return accepted(flow, specs=[spec], tasks=[task], supersedes=previous)

    latest = decide([])
    client.force_login(flow.manager)
    client.get("/decisions/")  # warms the per-process caches
    with django_assert_max_num_queries(15) as one:
        assert client.get("/decisions/").status_code == 200
    for _ in range(49):
        latest = decide([latest])

    with django_assert_max_num_queries(15) as many:
        response = client.get("/decisions/")

    assert len(listed(response)) == 50
    assert len(many.captured_queries) == len(one.captured_queries)


# --- Decision page ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_decision_page_shows_context_decision_and_alternatives(client, flow):
    propose(
        flow,
        consequences="Claims never wait on each other.",
        alternatives=[{"option": "Table lock", "reason": "it serialises every claim"}, "Redis"],
    )
    client.force_login(flow.agent)

    page = html(client.get("/decisions/FM-D1/"))

    assert '<div class="decision-text">Two agents must never get the same task.</div>' in page
    assert '<div class="decision-text">Use SELECT ... FOR UPDATE SKIP LOCKED.</div>' in page
    assert '<div class="decision-text">Claims never wait on each other.</div>' in page
    assert (
        "<li><strong>Table lock</strong> — rejected because it serialises every claim</li>" in page
    )
    assert "<li><strong>Redis</strong></li>" in page


@pytest.mark.django_db
def test_decision_page_shows_the_whole_chain_from_the_middle(client, flow):
    first = accepted(flow)
    middle = accepted(flow, supersedes=[first])
    accepted(flow, supersedes=[middle])
    client.force_login(flow.manager)

    response = client.get("/decisions/FM-D2/")

    assert [d.key for d in response.context["earlier"]] == ["FM-D1"]
    assert [d.key for d in response.context["later"]] == ["FM-D3"]
    assert chains(html(response)) == ["FM-D1→FM-D2→FM-D3"]


@pytest.mark.django_db
def test_decision_page_shows_its_timeline(client, flow):
    first = accepted(flow)
    accepted(flow, supersedes=[first])
    client.force_login(flow.manager)

    page = html(client.get("/decisions/FM-D1/"))

    entries = re.findall(
        r'<li><div>(\w+) (?:<span class="badge state-\w+">(\w+)</span> → )?'
        r'<span class="badge state-\w+">(\w+)</span></div><div class="when">[^<]* · ([^<]+)</div>',
        page,
    )
    proposed_by, decided_by = proposer(flow).username, flow.reviewer.username
    assert entries == [
        ("propose", "", "proposed", proposed_by),
        ("accept", "proposed", "accepted", decided_by),
        ("supersede", "accepted", "superseded", decided_by),
    ]


@pytest.mark.django_db
def test_decision_page_is_404_outside_the_users_projects(client, flow, other_flow):
    propose(other_flow)
    client.force_login(flow.manager)

    response = client.get("/decisions/OT-D1/")

    assert response.status_code == 404


# --- Verdicts --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("next_url", "landing"),
    [
        ("/tasks/FM-1/?attempt=1", "/tasks/FM-1/?attempt=1"),
        ("", "/decisions/FM-D1/"),
        ("https://evil.example/phish", "/decisions/FM-D1/"),
        ("//evil.example/phish", "/decisions/FM-D1/"),
    ],
)
def test_a_reviewer_accepts_and_returns_to_a_local_page_only(client, flow, next_url, landing):
    decision = propose(flow)
    client.force_login(flow.reviewer)

    response = client.post("/decisions/FM-D1/accept/", {"next": next_url, "reason": "agreed"})

    assert (response.status_code, response["Location"]) == (302, landing)
    decision.refresh_from_db()
    assert (decision.state, decision.decided_by, decision.verdict_reason) == (
        "accepted",
        flow.reviewer,
        "agreed",
    )


@pytest.mark.django_db
def test_rejecting_a_decision_without_a_reason_changes_nothing(client, flow):
    decision = propose(flow)
    events = Event.objects.count()
    client.force_login(flow.reviewer)

    response = client.post("/decisions/FM-D1/reject/", {"reason": " "}, follow=True)

    assert response.redirect_chain == [("/decisions/FM-D1/", 302)]
    assert messages_of(response) == ["FM-D1 not rejected: say why the decision is rejected"]
    assert (state_of(decision), Event.objects.count()) == ("proposed", events)


@pytest.mark.django_db
def test_an_agent_cannot_decide(client, flow):
    decision = propose(flow)
    events = Event.objects.count()
    client.force_login(flow.agent)

    page = html(client.get("/decisions/FM-D1/"))
    response = client.post("/decisions/FM-D1/accept/", follow=True)

    assert messages_of(response) == [
        "FM-D1 not accepted: deciding needs the reviewer or manager role in the project"
    ]
    assert (state_of(decision), Event.objects.count()) == ("proposed", events)
    assert 'action="/decisions/FM-D1/accept/"' not in page


@pytest.mark.django_db
def test_a_reviewer_of_another_project_gets_404_and_changes_nothing(client, flow, other_flow):
    decision = propose(flow)
    events = Event.objects.count()
    client.force_login(other_flow.reviewer)

    response = client.post("/decisions/FM-D1/accept/")

    assert response.status_code == 404
    assert (state_of(decision), Event.objects.count()) == ("proposed", events)


@pytest.mark.django_db
def test_an_htmx_verdict_answers_with_the_decision_row(client, flow):
    propose(flow, title="Claim with SKIP LOCKED")
    client.force_login(flow.reviewer)

    response = client.post("/decisions/FM-D1/accept/", headers={"HX-Request": "true"})

    assert response.status_code == 200
    row = html(response)
    assert row.startswith('<div class="decision-row stack" id="decision-FM-D1">')
    assert '<span class="badge state-accepted">accepted</span>' in row
    assert "<form" not in row
    assert "<html" not in row


@pytest.mark.django_db
def test_a_refused_htmx_verdict_shows_why_in_the_row(client, flow):
    decision = propose(flow)
    events = Event.objects.count()
    client.force_login(flow.reviewer)

    response = client.post("/decisions/FM-D1/reject/", headers={"HX-Request": "true"})

    row = html(response)
    assert '<p class="notice small">Not recorded: say why the decision is rejected</p>' in row
    assert '<span class="badge state-proposed">proposed</span>' in row
    assert "<html" not in row
    assert (state_of(decision), Event.objects.count()) == ("proposed", events)


# --- Spec pages ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_spec_page_renders_markdown_and_drops_scripts_and_script_links(client, flow):
    body = "# Claiming\n\nClaims are **exclusive**.\n\n<script>alert(1)</script>\n\n[x](javascript:alert(1))\n"
    spec = flow.spec(body=body)
    client.force_login(flow.agent)

    page = html(client.get(f"/specs/{spec.key}/"))

    markdown = re.search(r'<div class="markdown">(.*?)</div>', page, re.S)[1]
    assert "<h1>Claiming</h1>" in markdown
    assert "<p>Claims are <strong>exclusive</strong>.</p>" in markdown
    assert "<script" not in markdown
    assert "javascript:" not in page
    assert "alert(1)" not in page


@pytest.mark.django_db
def test_spec_page_shows_the_lines_that_changed_between_versions(client, flow):
    spec = flow.spec(body="# Claiming\n\nLeases last a minute.\n")
    services.spec_version_create(
        spec=spec,
        actor=flow.manager,
        body="# Claiming\n\nLeases last five minutes.\n",
        criteria=CRITERIA,
    )
    client.force_login(flow.manager)

    page = html(client.get(f"/specs/{spec.key}/?a=1&b=2"))

    rows = re.findall(r'<tr class="(\w+)"><td>(.*?)</td></tr>', page)
    assert ("del", "-Leases last a minute.") in rows
    assert ("add", "+Leases last five minutes.") in rows
    assert ("hunk", "@@ -1,3 +1,3 @@") in rows
    assert ("ctx", " # Claiming") in rows


@pytest.mark.django_db
def test_spec_diff_marks_only_changed_lines_as_added_or_removed(client, flow):
    spec = flow.spec(body="# Claiming\n\nLeases last a minute.\n", criteria=[])
    services.spec_version_create(
        spec=spec, actor=flow.manager, body="# Claiming\n\nLeases last five minutes.\n", criteria=[]
    )
    client.force_login(flow.manager)

    page = html(client.get(f"/specs/{spec.key}/?a=1&b=2"))

    assert re.findall(r'<tr class="(add|del)"><td>(.*?)</td></tr>', page) == [
        ("del", "-Leases last a minute."),
        ("add", "+Leases last five minutes."),
    ]


def criteria_v2(**changed):
    """The factory's criteria with the ones named by key replaced (None drops it)."""
    criteria = [changed.pop(c["key"].replace("-", "_"), c) for c in CRITERIA]
    return [c for c in criteria if c is not None] + list(changed.values())


def compared(client, flow, criteria, body="# Spec\n") -> str:
    spec = flow.spec()
    services.spec_version_create(spec=spec, actor=flow.manager, body=body, criteria=criteria)
    client.force_login(flow.manager)
    return html(client.get(f"/specs/{spec.key}/?a=1&b=2"))


def criteria_rows(page: str) -> list[str]:
    """The rows of the compare's criteria table, without the template's line breaks."""
    table = re.search(r'<table class="criteria-diff">(.*?)</table>', page, re.S)[1]
    rows = re.findall(r"<tr class=\"\w+\">(.*?)</tr>", table, re.S)
    return [re.sub(r">\s*\n\s*<", "><", row.strip()) for row in rows]


@pytest.mark.django_db
def test_spec_compare_shows_a_changed_criterion_by_key_with_its_text_and_check(client, flow):
    ac2 = {
        "key": "AC-2",
        "text": "Oversize uploads get 413.",
        "proof": {"check": "tests", "select": "tests/test_upload.py::test_oversize"},
    }

    page = compared(client, flow, criteria_v2(AC_2=ac2))

    assert "{&#x27;" not in page and "[{" not in page and "{'" not in page
    assert criteria_rows(page) == [
        '<td><span class="badge change-changed">changed</span></td><td class="mono key">AC-2</td>'
        '<td><div class="was"><span class="muted small">v1</span> <s>The queue is shown.</s></div>'
        '<div class="now"><span class="muted small">v2</span> Oversize uploads get 413.</div></td>'
        '<td class="small"><div class="was"><span class="muted">v1</span> <s>evidence: screenshot</s>'
        '</div><div class="now"><span class="muted">v2</span> tests '
        '<span class="mono">tests/test_upload.py::test_oversize</span></div></td>'
    ]
    assert '<p class="muted small">Unchanged: AC-1, AC-3.</p>' in page
    assert '<p class="muted small">The same in v1 and v2.</p>' in page  # the text


@pytest.mark.django_db
def test_spec_compare_lists_added_and_removed_criteria_by_key(client, flow):
    ac4 = {"key": "AC-4", "text": "Leases are documented.", "proof": {"check": "review"}}

    page = compared(client, flow, criteria_v2(AC_3=None, AC_4=ac4))

    assert criteria_rows(page) == [
        '<td><span class="badge change-added">added</span></td><td class="mono key">AC-4</td>'
        '<td>Leases are documented.</td><td class="small">review</td>',
        '<td><span class="badge change-removed">removed</span></td><td class="mono key">AC-3</td>'
        '<td>Readable code.</td><td class="small">review</td>',
    ]
    assert '<p class="muted small">Unchanged: AC-1, AC-2.</p>' in page


@pytest.mark.django_db
def test_spec_compare_shows_a_criterion_whose_proof_alone_changed_with_its_text_once(client, flow):
    ac3 = {"key": "AC-3", "text": "Readable code.", "proof": {"check": "evidence", "kind": "note"}}

    page = compared(client, flow, criteria_v2(AC_3=ac3))

    assert criteria_rows(page) == [
        '<td><span class="badge change-changed">changed</span></td><td class="mono key">AC-3</td>'
        '<td>Readable code.</td><td class="small"><div class="was"><span class="muted">v1</span> '
        '<s>review</s></div><div class="now"><span class="muted">v2</span> evidence: note</div></td>'
    ]


@pytest.mark.django_db
def test_spec_compare_marks_a_removed_line_that_starts_with_dashes_as_removed(client, flow):
    spec = flow.spec(body="# Spec\n-- a note\n")
    services.spec_version_create(spec=spec, actor=flow.manager, body="# Spec\n", criteria=CRITERIA)
    client.force_login(flow.manager)

    page = html(client.get(f"/specs/{spec.key}/?a=1&b=2"))

    rows = re.findall(r'<tr class="(\w+)"><td>(.*?)</td></tr>', page)
    assert rows == [
        ("hunk", "--- v1"),
        ("hunk", "+++ v2"),
        ("hunk", "@@ -1,2 +1 @@"),
        ("ctx", " # Spec"),
        ("del", "--- a note"),
    ]
    assert '<p class="muted small">The same in v1 and v2.</p>' in page  # the criteria


@pytest.mark.django_db
def test_spec_compare_of_two_identical_versions_says_so(client, flow):
    page = compared(client, flow, CRITERIA)

    assert '<p class="muted small">v1 and v2 are the same.</p>' in page
    assert '<table class="criteria-diff">' not in page


@pytest.mark.django_db
def test_spec_compare_query_count_does_not_grow_with_criteria(
    client, flow, django_assert_max_num_queries
):
    ac = {"key": "AC-9", "text": "One more.", "proof": {"check": "review"}}
    few = compared(client, flow, criteria_v2(AC_9=ac))  # logs the manager in
    with django_assert_max_num_queries(15) as one:
        client.get("/specs/FM-S1/?a=1&b=2")
    many = [
        {"key": f"AC-{n}", "text": f"Criterion {n}.", "proof": ac["proof"]} for n in range(4, 54)
    ]
    services.spec_version_create(
        spec=flow.project.specs.get(), actor=flow.manager, body="# Spec\n", criteria=many
    )

    with django_assert_max_num_queries(15) as more:
        page = html(client.get("/specs/FM-S1/?a=1&b=3"))

    assert len(more.captured_queries) == len(one.captured_queries)
    added = 'class="badge change-added"'
    assert (few.count(added), page.count(added)) == (1, 50)


@pytest.mark.django_db
def test_spec_page_is_404_outside_the_users_projects(client, flow, other_flow):
    spec = other_flow.spec()
    client.force_login(flow.manager)

    response = client.get(f"/specs/{spec.key}/")

    assert response.status_code == 404
