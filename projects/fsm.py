"""Firing a state-machine transition the one way this codebase allows.

Services call ``fire`` inside their ``transaction.atomic()`` block, on a row they
have locked. It checks, in order, that the transition exists from the current
state (409 ``invalid_state``), that the actor may fire it (403, the transition's
``permission``), and that its conditions hold (409 with the condition's code);
then it runs the ``@transition`` method, saves only the fields that changed
(``ConcurrentTransitionMixin`` adds ``WHERE state = <old state>``) and writes the
``Event`` — all in the caller's transaction.
"""

from collections.abc import Callable

from django.db.models.signals import class_prepared
from django_fsm import ConcurrentTransition, FSMFieldMixin

from projects.errors import Conflict, PermissionDenied
from projects.models import Event
from projects.roles import Rule


def historical_models_collect_no_transitions() -> None:
    """A migration's historical model (module ``__fake__``) keeps its FSM field but no
    receiver on ``class_prepared``.

    django-fsm connects one receiver per FSM field it sees, with no sender, historical models
    included, to collect the class's ``@transition`` methods. A migration run renders
    thousands of historical models, each ``class_prepared`` then calls every receiver still
    alive (hundreds): most of a fresh ``migrate`` went there (ADR 0015). A historical model
    has no methods, so its transitions are none, which is what it is given here. Fails
    loudly if an upgrade renames what it wraps.
    """
    contribute = FSMFieldMixin.contribute_to_class
    if getattr(contribute, "historical_models_collect_no_transitions", False):
        return
    FSMFieldMixin._collect_transitions  # noqa: B018 - the receiver this disconnects

    def contribute_to_class(self, cls, name, *args, **kwargs):
        contribute(self, cls, name, *args, **kwargs)
        if cls.__module__ == "__fake__":
            class_prepared.disconnect(self._collect_transitions)
            self.transitions[cls] = {}

    contribute_to_class.historical_models_collect_no_transitions = True
    FSMFieldMixin.contribute_to_class = contribute_to_class


class Condition:
    """A transition condition (``condition(instance) -> bool``) that knows its refusal."""

    def __init__(self, refusal: Callable[[object], tuple[str, str] | None], name: str):
        self.refusal = refusal
        self.__name__ = name

    def __call__(self, instance) -> bool:
        return self.refusal(instance) is None

    def __repr__(self) -> str:
        return f"<Condition {self.__name__}>"


def check(instance, name: str, *, actor) -> None:
    """Raise the refusal ``fire`` would raise, without changing anything."""
    method = getattr(instance, name)
    meta = method._django_fsm
    source = meta.field.get_state(instance)
    if not meta.has_transition(source):
        verb = name.replace("_", " ")
        raise Conflict(
            f"{instance} is {source}; '{verb}' is not allowed from that state",
            code="invalid_state",
            extra={"state": source},
        )
    transition = meta.get_transition(source)
    permission = transition.permission
    if permission is not None and not permission(instance, actor):
        if isinstance(permission, Rule):
            code, reason = permission.refusal(instance, actor)
        else:
            code, reason = "permission_denied", "you may not do this"
        raise PermissionDenied(reason, code=code)
    for condition in transition.conditions:
        refusal = condition.refusal(instance) if isinstance(condition, Condition) else None
        if refusal is None and not condition(instance):
            refusal = ("condition_failed", f"a condition of '{name}' does not hold")
        if refusal is not None:
            code, reason = refusal
            raise Conflict(reason, code=code)


def fire(instance, name: str, *, actor, reason: str = "", extra: dict | None = None, **kwargs):
    """Fire transition ``name`` on a locked ``instance`` and record its Event; return the Event."""
    check(instance, name, actor=actor)
    meta = getattr(instance, name)._django_fsm
    source = meta.field.get_state(instance)
    fields = instance._meta.concrete_fields
    before = {f.attname: f.value_from_object(instance) for f in fields}
    getattr(instance, name)(**kwargs)
    changed = [f.attname for f in fields if f.value_from_object(instance) != before[f.attname]]
    # ``auto_now`` fields (a task's ``updated_at``) are written only when named.
    changed += [f.attname for f in fields if getattr(f, "auto_now", False)]
    try:
        instance.save(update_fields=changed)
    except ConcurrentTransition as exc:
        raise Conflict(
            f"{instance} was changed by someone else; reload and try again",
            code="concurrent_update",
        ) from exc
    return Event.record(
        instance,
        actor=actor,
        transition=name,
        from_state=source,
        to_state=meta.field.get_state(instance),
        reason=reason,
        extra=extra,
    )
