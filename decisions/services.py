"""Every write to specs, spec versions and decisions; one service per state change.

Same shape as ``tasks.services``: atomic, row-locked, transition fired through
``projects.fsm.fire`` (which checks permission and writes the Event).
"""

import re
from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from decisions.models import (
    Check,
    Criterion,
    Decision,
    DecisionState,
    Spec,
    SpecAmendment,
    SpecVersion,
    SpecVersionState,
)
from projects.errors import Conflict
from projects.fsm import check, fire
from projects.kinds import Kind
from projects.models import Event, Project
from projects.roles import Role
from projects.services import check_storable, require_role

CRITERION_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")


def clean_criteria(criteria) -> list[dict]:
    """Validate acceptance criteria: ``[{"key", "text", "proof": {"check": ...}}]``.

    Each proof names the check that proves the criterion: ``tests`` with a ``select``
    pattern, ``evidence`` with a ``kind``, or ``review``; anything else it holds is dropped.
    """
    if not isinstance(criteria, list):
        raise ValidationError({"criteria": "must be a list of criteria"})
    cleaned, seen = [], set()
    for index, item in enumerate(criteria, start=1):
        where = f"criterion {index}"
        if not isinstance(item, dict):
            raise ValidationError({"criteria": f"{where} must be an object"})
        key, text, proof = item.get("key"), item.get("text"), item.get("proof")
        if not isinstance(key, str) or not CRITERION_KEY.match(key):
            raise ValidationError({"criteria": f"{where}: key must look like AC-1"})
        if key in seen:
            raise ValidationError({"criteria": f"{where}: key {key} is used twice"})
        seen.add(key)
        if not isinstance(text, str) or not text.strip():
            raise ValidationError({"criteria": f"{key}: text is required"})
        if not isinstance(proof, dict) or proof.get("check") not in Check.values:
            raise ValidationError(
                {"criteria": f"{key}: proof.check must be one of {', '.join(Check.values)}"}
            )
        if proof["check"] == Check.TESTS:
            select = proof.get("select")
            if not isinstance(select, str) or not select.strip():
                raise ValidationError(
                    {
                        "criteria": f"{key}: a tests check needs a select pattern, e.g. tests/test_x.py::*"
                    }
                )
            proof = {"check": Check.TESTS.value, "select": select.strip()}
        elif proof["check"] == Check.EVIDENCE:
            if proof.get("kind") not in Kind.values:
                raise ValidationError(
                    {
                        "criteria": f"{key}: an evidence check needs a kind ({', '.join(Kind.values)})"
                    }
                )
            proof = {"check": Check.EVIDENCE.value, "kind": proof["kind"]}
        else:
            proof = {"check": Check.REVIEW.value}
        cleaned.append({"key": key, "text": text.strip(), "proof": proof})
    # What is kept must be storable; what a proof carries besides its check is dropped, and
    # a NUL in it harms nothing (the schema cannot say what such a name may hold).
    check_storable(cleaned, "criteria")
    return cleaned


def _clean_body(body) -> str:
    if not isinstance(body, str) or not body.strip():
        raise ValidationError({"body": "the spec needs a body"})
    return body


def _create_version(*, spec: Spec, author, body: str, criteria: list[dict], source_decision=None):
    number = (spec.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    version = SpecVersion.objects.create(
        spec=spec, number=number, body=body, author=author, source_decision=source_decision
    )
    Criterion.objects.bulk_create(
        Criterion(spec_version=version, key=c["key"], text=c["text"], proof=c["proof"], position=i)
        for i, c in enumerate(criteria)
    )
    Event.record(version, actor=author, transition="create", from_state="", to_state=version.state)
    return version


def spec_create(
    *, project: Project, actor, title: str, body: str, criteria, origin: str = ""
) -> Spec:
    """Create spec ``FM-S<n>`` with version 1 as a draft. Managers.

    ``origin`` names where it came from outside (``github:owner/name#12``), unique in the
    project (a database constraint).
    """
    require_role(actor, project.pk, Role.MANAGER)
    criteria = clean_criteria(criteria)
    body = _clean_body(body)
    if not isinstance(title, str) or not title.strip():
        raise ValidationError({"title": "the spec needs a title"})
    if len(title.strip()) > Spec._meta.get_field("title").max_length:
        raise ValidationError({"title": "at most 200 characters"})
    with transaction.atomic():
        number, key = Spec.next_key_in(project)
        spec = Spec.objects.create(
            project=project,
            number=number,
            key=key,
            title=title.strip(),
            created_by=actor,
            origin=origin,
        )
        _create_version(spec=spec, author=actor, body=body, criteria=criteria)
    return spec


def spec_version_create(*, spec: Spec, actor, body: str, criteria) -> SpecVersion:
    """Add the next version of a spec as a draft. Managers."""
    require_role(actor, spec.project_id, Role.MANAGER)
    criteria = clean_criteria(criteria)
    body = _clean_body(body)
    with transaction.atomic():
        spec = Spec.objects.select_for_update(no_key=True, of=("self",)).get(pk=spec.pk)
        return _create_version(spec=spec, author=actor, body=body, criteria=criteria)


def _accept_version(version: SpecVersion, *, actor, reason: str) -> None:
    # Supersede first: the one-accepted-version constraint is checked per statement.
    current = (
        version.spec.versions.select_for_update(no_key=True, of=("self",))
        .filter(state=SpecVersionState.ACCEPTED)
        .first()
    )
    if current is not None:
        current.spec = version.spec
        fire(current, "supersede", actor=actor, reason=f"superseded by v{version.number}")
    fire(version, "accept", actor=actor, reason=reason)


def spec_version_accept(*, version: SpecVersion, actor, reason: str = "") -> SpecVersion:
    """draft → accepted; the spec's previous accepted version becomes superseded. Managers."""
    with transaction.atomic():
        # Locking the spec serialises two accepts of versions of the same spec.
        spec = Spec.objects.select_for_update(no_key=True, of=("self",)).get(pk=version.spec_id)
        version = SpecVersion.objects.select_for_update(no_key=True, of=("self",)).get(
            pk=version.pk
        )
        version.spec = spec
        check(version, "accept", actor=actor)
        _accept_version(version, actor=actor, reason=reason)
    return version


# --- Decisions ------------------------------------------------------------------------------


def _clean_alternatives(alternatives) -> list[dict]:
    if not isinstance(alternatives, list):
        raise ValidationError({"alternatives": "must be a list of {option, reason}"})
    cleaned = []
    for item in alternatives:
        if isinstance(item, str):
            item = {"option": item, "reason": ""}
        if not isinstance(item, dict) or not str(item.get("option", "")).strip():
            raise ValidationError({"alternatives": "each alternative needs an option"})
        cleaned.append(
            {"option": str(item["option"]).strip(), "reason": str(item.get("reason", ""))}
        )
    return cleaned


def decision_propose(
    *,
    project: Project,
    actor,
    title: str,
    context: str,
    decision: str,
    consequences: str = "",
    alternatives=(),
    supersedes: Iterable[Decision] = (),
    tasks: Iterable = (),
    specs: Iterable[Spec] = (),
    amendments: Iterable[dict] = (),
    attempt=None,
) -> Decision:
    """Record a proposed decision ``FM-D<n>``.

    An agent proposes during its attempt (it must hold the live lease, and the
    attempt's task is added to the tasks it concerns); reviewers and managers may
    propose directly. ``amendments`` are ``{"spec", "body", "criteria"}``: the new
    text of each spec, applied when the decision is accepted.
    """
    supersedes, tasks, specs = list(supersedes), list(tasks), list(specs)
    for field, value in (("title", title), ("context", context), ("decision", decision)):
        if not isinstance(value, str) or not value.strip():
            raise ValidationError({field: "this field is required"})
    if len(title.strip()) > Decision._meta.get_field("title").max_length:
        raise ValidationError({"title": "at most 200 characters"})
    alternatives = _clean_alternatives(list(alternatives))
    cleaned_amendments = []
    for amendment in amendments:
        spec = amendment["spec"]
        cleaned_amendments.append(
            {
                "spec": spec,
                "body": _clean_body(amendment.get("body")),
                "criteria": clean_criteria(amendment.get("criteria", [])),
            }
        )
        if spec not in specs:
            specs.append(spec)
    for field, objects in (("supersedes", supersedes), ("tasks", tasks), ("specs", specs)):
        foreign = [str(o) for o in objects if o.project_id != project.pk]
        if foreign:
            raise ValidationError({field: f"{', '.join(foreign)} belong to another project"})
    not_accepted = list(
        Decision.objects.filter(pk__in=[d.pk for d in supersedes])
        .exclude(state=DecisionState.ACCEPTED)
        .values_list("key", flat=True)
    )
    if not_accepted:
        raise ValidationError(
            {"supersedes": f"only accepted decisions can be superseded: {', '.join(not_accepted)}"}
        )
    if attempt is None:
        require_role(actor, project.pk, Role.REVIEWER, Role.MANAGER)

    with transaction.atomic():
        if attempt is not None:
            attempt = attempt.fence(actor)  # 409 lease_lost: a lost lease proposes nothing
            if attempt.task.project_id != project.pk:
                raise ValidationError({"project": "the attempt belongs to another project"})
            if attempt.task not in tasks:
                tasks.append(attempt.task)
        number, key = Decision.next_key_in(project)
        record = Decision.objects.create(
            project=project,
            number=number,
            key=key,
            title=title.strip(),
            context=context,
            decision=decision,
            consequences=consequences,
            alternatives=alternatives,
            proposed_by=actor,
            proposed_in=attempt,
        )
        record.supersedes.set(supersedes)
        record.tasks.set(tasks)
        record.specs.set(specs)
        for amendment in cleaned_amendments:
            SpecAmendment.objects.create(
                decision=record,
                spec=amendment["spec"],
                base_version=amendment["spec"].current_version(),
                body=amendment["body"],
                criteria=amendment["criteria"],
            )
        Event.record(
            record, actor=actor, transition="propose", from_state="", to_state=record.state
        )
    return record


def _apply_amendment(amendment: SpecAmendment, decision: Decision, *, actor) -> SpecVersion:
    spec = Spec.objects.select_for_update(no_key=True, of=("self",)).get(pk=amendment.spec_id)
    current = spec.current_version()
    if (current.pk if current else None) != amendment.base_version_id:
        base = f"v{amendment.base_version.number}" if amendment.base_version_id else "no version"
        raise Conflict(
            f"{spec} moved to v{current.number if current else '?'} after {decision} was written"
            f" against {base}; propose the amendment again on the current version",
            code="spec_moved",
        )
    version = _create_version(
        spec=spec,
        author=decision.proposed_by,
        body=amendment.body,
        criteria=amendment.criteria,
        source_decision=decision,
    )
    _accept_version(version, actor=actor, reason=f"amended by {decision}")
    return version


def decision_accept(*, decision: Decision, actor, reason: str = "") -> Decision:
    """proposed → accepted, with its consequences in the same transaction.

    Each amended spec gets a new accepted version (the old one is superseded), and
    each decision named in ``supersedes`` becomes superseded. Reviewers or managers;
    a decision that amends a spec, managers only.
    """
    reason = (reason or "").strip()
    with transaction.atomic():
        decision = Decision.objects.select_for_update(no_key=True, of=("self",)).get(pk=decision.pk)
        check(decision, "accept", actor=actor)
        for amendment in decision.amendments.select_related("base_version"):
            _apply_amendment(amendment, decision, actor=actor)
        for old in (
            Decision.objects.select_for_update(no_key=True, of=("self",))
            .filter(superseded_by=decision)
            .order_by("pk")
        ):
            if old.state != DecisionState.ACCEPTED:
                raise Conflict(
                    f"{old} is {old.state}, so {decision} cannot supersede it",
                    code="not_supersedable",
                )
            fire(old, "supersede", actor=actor, reason=f"superseded by {decision}")
        fire(decision, "accept", actor=actor, reason=reason, by=actor, verdict_reason=reason)
    return decision


def decision_reject(*, decision: Decision, actor, reason: str) -> Decision:
    """proposed → rejected, with the reason on record. Reviewers or managers."""
    reason = (reason or "").strip()
    with transaction.atomic():
        decision = Decision.objects.select_for_update(no_key=True, of=("self",)).get(pk=decision.pk)
        check(decision, "reject", actor=actor)
        if not reason:
            raise ValidationError({"reason": "say why the decision is rejected"})
        fire(decision, "reject", actor=actor, reason=reason, by=actor, verdict_reason=reason)
    return decision
