"""The Django admin: every page opens, evidence and events are read-only, actions call services."""

import pytest
from axes.models import AccessAttempt
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken

from decisions import services as decision_services
from decisions.models import Decision, Spec, SpecVersion
from evidence import services as evidence_services
from evidence.models import Evidence, GateRun
from projects.models import Event, Membership, Project
from tasks import attempts
from tasks.models import Attempt, Label, Task

ADMIN_MODELS = [Project, Membership, Label, Task, Attempt, Event]
ADMIN_MODELS += [Spec, SpecVersion, Decision, Evidence, GateRun]


def admin_url(model, view, *args):
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def admin_user(db):
    return get_user_model().objects.create_superuser("root", "root@example.invalid", "pw")


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.fixture
def history(flow):
    """A little of everything: a spec, a reviewed task with evidence and gate runs, decisions."""
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec, labels=["backend"])
    flow.attach(attempt, criteria=["AC-1"])
    flow.attach(attempt, b"ci log\n", actor=flow.verifier)
    flow.attach(attempt, b"# Notes\n", kind="note", name="notes.md")
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="done", change={})
    for run in evidence_services.gate_runs_create(attempt=attempt, policy={"tests-pass": {}}):
        evidence_services.gate_run_start(run=run)
        evidence_services.gate_run_finish(
            run=run, outcome="passed", verdict={}, summary="ok", report=(b"ok\n", "log", "r", "t")
        )
    attempts.attempt_checks_conclude(attempt=attempt)
    decision = decision_services.decision_propose(
        project=flow.project, actor=flow.reviewer, title="T", context="C", decision="D"
    )
    flow.draft(title="draft")
    return {"task": task, "attempt": attempt, "decision": decision}


@pytest.mark.django_db
@pytest.mark.parametrize("model", ADMIN_MODELS, ids=lambda m: m.__name__)
def test_every_changelist_opens(admin_client, history, model):
    response = admin_client.get(admin_url(model, "changelist"))

    assert response.status_code == 200
    assert response.context["cl"].result_count == model.objects.count() > 0


@pytest.mark.django_db
@pytest.mark.parametrize("model", ADMIN_MODELS, ids=lambda m: m.__name__)
def test_every_change_page_opens(admin_client, history, model):
    obj = model.objects.order_by("pk").last()

    response = admin_client.get(admin_url(model, "change", obj.pk))

    assert response.status_code == 200


@pytest.mark.django_db
def test_the_task_changelist_searches_and_filters(admin_client, history):
    url = admin_url(Task, "changelist")

    by_key = admin_client.get(url, {"q": history["task"].key})
    by_state = admin_client.get(url, {"state": "draft"})

    assert [t.key for t in by_key.context["cl"].result_list] == [history["task"].key]
    assert [t.title for t in by_state.context["cl"].result_list] == ["draft"]


@pytest.mark.django_db
@pytest.mark.parametrize("model", [Evidence, Event], ids=lambda m: m.__name__)
def test_evidence_and_event_pages_have_no_save_or_delete(admin_client, history, model):
    obj = model.objects.order_by("pk").first()

    response = admin_client.get(admin_url(model, "change", obj.pk))

    assert response.status_code == 200
    assert b'name="_save"' not in response.content
    assert b'name="_continue"' not in response.content
    assert admin_url(model, "delete", obj.pk).encode() not in response.content
    assert response.context["has_change_permission"] is False


@pytest.mark.django_db
def test_posting_a_change_to_evidence_changes_nothing(admin_client, history):
    evidence = Evidence.objects.filter(provenance="agent").first()
    before = Evidence.objects.filter(pk=evidence.pk).values().get()

    response = admin_client.post(
        admin_url(Evidence, "change", evidence.pk),
        {"provenance": "verifier", "kind": "junit", "name": "forged.xml", "_save": "Save"},
    )

    assert response.status_code == 403
    assert Evidence.objects.filter(pk=evidence.pk).values().get() == before


@pytest.mark.django_db
def test_posting_a_change_to_an_event_changes_nothing(admin_client, history):
    event = Event.objects.order_by("pk").first()
    before, count = Event.objects.filter(pk=event.pk).values().get(), Event.objects.count()

    response = admin_client.post(
        admin_url(Event, "change", event.pk),
        {"transition": "approve", "to_state": "done", "reason": "rewritten", "_save": "Save"},
    )

    assert response.status_code == 403
    assert Event.objects.filter(pk=event.pk).values().get() == before
    assert Event.objects.count() == count


@pytest.mark.django_db
@pytest.mark.parametrize("model", [Evidence, Event], ids=lambda m: m.__name__)
def test_evidence_and_events_cannot_be_deleted_through_the_admin(admin_client, history, model):
    obj, count = model.objects.order_by("pk").first(), model.objects.count()

    page = admin_client.post(admin_url(model, "delete", obj.pk), {"post": "yes"})
    bulk = admin_client.post(
        admin_url(model, "changelist"),
        {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"},
    )

    assert page.status_code == 403
    assert bulk.status_code == 200
    assert bulk.context["action_form"] is None  # no bulk delete (or any action) is offered
    assert model.objects.count() == count


@pytest.mark.django_db
def test_the_publish_action_publishes_a_draft_through_the_service(admin_client, admin_user, flow):
    task = flow.draft()

    response = admin_client.post(
        admin_url(Task, "changelist"),
        {"action": "publish", "_selected_action": [task.pk]},
        follow=True,
    )

    task.refresh_from_db()
    assert task.state == "ready"
    event = Event.objects.get(task=task, transition="publish")
    assert (event.actor, event.from_state, event.to_state) == (admin_user, "draft", "ready")
    assert messages_of(response) == ["Publish: 1 done."]


@pytest.mark.django_db
def test_the_publish_action_reports_a_refusal_and_changes_nothing(admin_client, flow):
    task = flow.ready()
    events_before = Event.objects.count()

    response = admin_client.post(
        admin_url(Task, "changelist"),
        {"action": "publish", "_selected_action": [task.pk]},
        follow=True,
    )

    assert messages_of(response) == [
        f"{task.key}: {task.key} is ready; 'publish' is not allowed from that state"
    ]
    assert Task.objects.get(pk=task.pk).state == "ready"
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_the_cancel_action_asks_for_a_reason_first(admin_client, admin_user, flow):
    task = flow.ready()
    url = admin_url(Task, "changelist")
    events_before = Event.objects.count()

    form = admin_client.post(url, {"action": "cancel", "_selected_action": [task.pk]})

    assert form.templates[0].name == "admin/transition_reason.html"
    assert (Task.objects.get(pk=task.pk).state, Event.objects.count()) == ("ready", events_before)
    admin_client.post(url, {"action": "cancel", "_selected_action": [task.pk], "reason": "dup"})
    event = Event.objects.get(task=task, transition="cancel")
    assert (event.actor, event.reason, event.to_state) == (admin_user, "dup", "cancelled")


@pytest.mark.django_db
def test_the_reject_action_without_a_reason_shows_the_form_and_changes_nothing(admin_client, flow):
    decision = decision_services.decision_propose(
        project=flow.project, actor=flow.reviewer, title="T", context="C", decision="D"
    )
    events_before = Event.objects.count()

    response = admin_client.post(
        admin_url(Decision, "changelist"),
        {"action": "reject", "_selected_action": [decision.pk], "reason": "  "},
    )

    assert response.status_code == 200
    assert response.templates[0].name == "admin/transition_reason.html"
    assert b"A reason is required." in response.content
    assert b'name="reason"' in response.content
    assert Decision.objects.get(pk=decision.pk).state == "proposed"
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_the_reject_action_with_a_reason_rejects_the_decision(admin_client, admin_user, flow):
    decision = decision_services.decision_propose(
        project=flow.project, actor=flow.reviewer, title="T", context="C", decision="D"
    )

    response = admin_client.post(
        admin_url(Decision, "changelist"),
        {"action": "reject", "_selected_action": [decision.pk], "reason": "bloats backups"},
    )

    assert response.status_code == 302
    decision.refresh_from_db()
    assert (decision.state, decision.decided_by, decision.verdict_reason) == (
        "rejected",
        admin_user,
        "bloats backups",
    )
    event = Event.objects.get(object_key=decision.key, transition="reject")
    assert (event.actor, event.reason) == (admin_user, "bloats backups")


@pytest.mark.django_db
def test_the_accept_action_accepts_a_spec_version(admin_client, admin_user, flow):
    spec = flow.spec()
    v2 = decision_services.spec_version_create(
        spec=spec, actor=flow.manager, body="v2", criteria=[]
    )

    admin_client.post(
        admin_url(SpecVersion, "changelist"), {"action": "accept", "_selected_action": [v2.pk]}
    )

    assert dict(spec.versions.values_list("number", "state")) == {1: "superseded", 2: "accepted"}
    assert Event.objects.get(object_key="FM-S1 v2", transition="accept").actor == admin_user


def add_task_form(flow, **fields):
    return {
        "project": flow.project.pk,
        "title": "Added in the admin",
        "description": "",
        "priority": 2,
        "allowed_paths": '["tasks/**"]',
        "max_attempts": 3,
        "attempts-TOTAL_FORMS": 0,
        "attempts-INITIAL_FORMS": 0,
        "attempts-MIN_NUM_FORMS": 0,
        "attempts-MAX_NUM_FORMS": 0,
        "_save": "Save",
        **fields,
    }


@pytest.mark.django_db
def test_adding_a_task_in_the_admin_goes_through_the_service(admin_client, admin_user, flow):
    flow.draft(title="first")
    label = Label.objects.create(project=flow.project, name="ui")

    response = admin_client.post(
        admin_url(Task, "add"), add_task_form(flow, labels=[label.pk]), follow=True
    )

    task = Task.objects.get(title="Added in the admin")
    assert (task.key, task.number, task.state, task.created_by) == ("FM-2", 2, "draft", admin_user)
    assert (task.priority, task.allowed_paths, list(task.labels.all())) == (
        2,
        ["tasks/**"],
        [label],
    )
    event = Event.objects.get(task=task)
    assert (event.transition, event.from_state, event.to_state, event.actor) == (
        "create",
        "",
        "draft",
        admin_user,
    )
    assert LogEntry.objects.get().object_repr == "FM-2"
    assert "FM-2" in messages_of(response)[0]


@pytest.mark.django_db
def test_adding_a_task_the_service_refuses_shows_the_error_on_the_form(admin_client, flow):
    events_before = Event.objects.count()

    response = admin_client.post(
        admin_url(Task, "add"), add_task_form(flow, allowed_paths='["../etc"]')
    )

    assert response.status_code == 200
    assert "must be relative to the repository root" in response.content.decode()
    assert (Task.objects.count(), Event.objects.count()) == (0, events_before)


@pytest.mark.django_db
def test_editing_a_task_in_the_admin_keeps_its_key_state_and_trail(admin_client, flow):
    task = flow.ready(title="old title", allowed_paths=["tasks/**"])
    events_before = Event.objects.count()

    response = admin_client.post(
        admin_url(Task, "change", task.pk),
        add_task_form(flow, title="new title", project="", allowed_paths='["tasks/**"]'),
    )

    assert response.status_code == 302
    task.refresh_from_db()
    assert (task.title, task.key, task.state, task.project) == (
        "new title",
        "FM-1",
        "ready",
        flow.project,
    )
    edit = Event.objects.get(task=task, transition="edit")
    assert (Event.objects.count(), edit.extra) == (
        events_before + 1,
        {"fields": ["priority", "title"]},
    )


@pytest.mark.django_db
def test_the_admin_lists_and_revokes_tokens_but_issues_none(admin_client, flow):
    row, _ = AuthToken.objects.create(user=flow.agent)

    listed = admin_client.get(admin_url(AuthToken, "changelist"))
    add = admin_client.post(admin_url(AuthToken, "add"), {"user": flow.agent.pk, "expiry": ""})
    admin_client.post(admin_url(AuthToken, "delete", row.pk), {"post": "yes"})

    assert row.token_key.encode() in listed.content
    assert add.status_code == 403
    assert AuthToken.objects.count() == 0


@pytest.mark.django_db
def test_the_admin_lists_login_lockouts_to_clear(admin_client, flow):
    Client().post("/login/", {"username": "fm-agent", "password": "wrong"})

    response = admin_client.get(admin_url(AccessAttempt, "changelist"))

    assert response.context["cl"].result_count == 1
    assert b"fm-agent" in response.content
