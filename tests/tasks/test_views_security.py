"""The review UI's tokens page (issued once, kept hashed, capped, revoked), and the security
headers and CSRF checks of every page."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from knox.crypto import hash_token
from knox.models import AuthToken
from knox.settings import CONSTANTS

from projects.models import Event
from tests.tasks.pages import html, messages_of, state_of

# --- Tokens ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_tokens_page_lists_only_the_users_tokens(client, flow):
    mine, _ = AuthToken.objects.create(user=flow.agent)
    theirs, _ = AuthToken.objects.create(user=flow.reviewer)
    client.force_login(flow.agent)

    response = client.get("/tokens/")

    assert list(response.context["rows"]) == [mine]
    assert f'value="{mine.token_key}"' in html(response)
    assert theirs.token_key not in html(response)


@pytest.mark.django_db
def test_a_new_token_is_shown_once_and_only_its_hash_is_kept(client, flow):
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": "7"})
    token = response.context["created"]
    later = client.get("/tokens/")

    assert response.status_code == 200
    assert token.startswith("fm_")
    assert f'<pre class="mono" id="new-token">{token}</pre>' in html(response)
    row = AuthToken.objects.get(user=flow.agent)
    assert (row.digest, row.token_key) == (hash_token(token), token[: CONSTANTS.TOKEN_KEY_LENGTH])
    assert timedelta(days=7) - (row.expiry - timezone.now()) < timedelta(minutes=1)
    assert token not in html(later)


@pytest.mark.django_db
def test_the_answer_that_shows_a_new_token_is_never_cached(client, flow):
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": "7"})

    assert response.context["created"] in html(response)
    assert "no-store" in response["Cache-Control"].replace(" ", "").split(",")
    assert response["Pragma"] == "no-cache"


@pytest.mark.django_db
@pytest.mark.parametrize("days", ["0", "91"])
def test_an_agent_cannot_issue_a_token_that_never_expires_or_outlives_90_days(client, flow, days):
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": days})

    assert response.status_code == 200
    assert response.context["created"] is None
    assert response.context["form"].errors["days"] == [
        "Ensure this value is greater than or equal to 1."
        if days == "0"
        else "fm-agent's tokens last 1 to 90 days (the agent bound, "
        "FACTORY_TOKEN_MAX_DAYS_AGENT); none lasts forever"
    ]
    assert AuthToken.objects.count() == 0


@pytest.mark.django_db
def test_a_number_of_days_too_long_to_read_is_a_form_error_not_a_500(client, flow):
    client.force_login(flow.manager)

    response = client.post("/tokens/", {"days": "9" * 5000})

    assert response.status_code == 200
    assert response.context["form"].errors["days"] == ["Enter a whole number."]
    assert AuthToken.objects.count() == 0


@pytest.mark.django_db
def test_a_manager_may_issue_a_token_for_a_year(client, flow):
    client.force_login(flow.manager)

    page = client.get("/tokens/")
    client.post("/tokens/", {"days": "365"})

    assert "Days until it expires (1 to 365)" in html(page)
    assert AuthToken.objects.get().expiry - timezone.now() > timedelta(days=364)


@pytest.mark.django_db
def test_a_token_past_the_cap_is_a_form_error_naming_it(client, flow, settings):
    settings.FACTORY_TOKEN_MAX_PER_USER = 2
    for _ in range(2):
        AuthToken.objects.create(user=flow.agent)
    client.force_login(flow.agent)

    response = client.post("/tokens/", {"days": "7"})

    assert response.context["created"] is None
    assert response.context["form"].non_field_errors() == [
        "fm-agent already has 2 unexpired tokens, the most allowed "
        "(FACTORY_TOKEN_MAX_PER_USER=2); revoke one first, on the API tokens page (/tokens/) "
        "or in the admin"
    ]
    assert AuthToken.objects.filter(user=flow.agent).count() == 2


@pytest.mark.django_db
def test_revoking_a_token_deletes_it(client, flow):
    row, _ = AuthToken.objects.create(user=flow.agent)
    client.force_login(flow.agent)

    response = client.post("/tokens/revoke/", {"token_key": row.token_key}, follow=True)

    assert response.redirect_chain == [("/tokens/", 302)]
    assert messages_of(response) == ["Token revoked."]
    assert AuthToken.objects.filter(user=flow.agent).count() == 0


@pytest.mark.django_db
def test_revoking_someone_elses_token_deletes_nothing(client, flow):
    theirs, _ = AuthToken.objects.create(user=flow.reviewer)
    client.force_login(flow.agent)

    response = client.post("/tokens/revoke/", {"token_key": theirs.token_key}, follow=True)

    assert messages_of(response) == ["No such token."]
    assert list(AuthToken.objects.all()) == [theirs]


# --- Security headers and CSRF ---------------------------------------------------------------


@pytest.mark.django_db
def test_every_page_sends_a_strict_csp_and_denies_framing(client, flow):
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec)
    log = flow.attach(attempt, b"x\n")
    client.force_login(flow.manager)
    pages = ["/review/", "/tasks/", f"/tasks/{task.key}/", f"/tasks/{task.key}/gates/"]
    pages += [f"/evidence/{log.pk}/", "/decisions/", f"/specs/{spec.key}/", "/dashboard/"]
    pages += ["/tokens/"]

    responses = [client.get(path) for path in pages] + [Client().get("/login/")]

    assert [r.status_code for r in responses] == [200] * 10
    assert all("script-src 'self'" in r["Content-Security-Policy"] for r in responses)
    assert all(r["X-Frame-Options"] == "DENY" for r in responses)


@pytest.mark.django_db
def test_forms_carry_a_csrf_token_and_a_post_without_it_is_403(flow):
    task, _ = flow.in_review()
    events = Event.objects.count()
    client = Client(enforce_csrf_checks=True)
    client.force_login(flow.reviewer)

    page = html(client.get(f"/tasks/{task.key}/"))
    forged = client.post(f"/tasks/{task.key}/review/", {"verdict": "approve"})

    assert forged.status_code == 403
    assert (state_of(task), Event.objects.count()) == ("in_review", events)
    form = re.search(r'<form method="post" action="/tasks/FM-1/review/".*?</form>', page, re.S)[0]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)[1]
    genuine = client.post(
        f"/tasks/{task.key}/review/", {"verdict": "approve", "csrfmiddlewaretoken": token}
    )
    assert (genuine.status_code, state_of(task)) == (302, "done")
