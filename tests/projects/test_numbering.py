"""``projects.models.NumberedInProject``: specs, decisions and tasks are numbered per project,
with origin, by one abstract model, keeping each model's constraint names."""

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from decisions.models import Decision, Spec
from projects.models import NumberedInProject
from tasks.models import Task


@pytest.mark.parametrize("model", [Spec, Decision, Task])
def test_each_numbered_model_keeps_its_own_constraint_names(model):
    name = model._meta.model_name

    assert issubclass(model, NumberedInProject)
    assert {c.name for c in model._meta.constraints} == {
        f"{name}_number_unique_per_project",
        f"{name}_origin_unique_per_project",
    }
    assert model._meta.ordering == ["project", "number"]


@pytest.mark.django_db
def test_numbers_come_from_the_kinds_own_counter(flow):
    with transaction.atomic():
        keys = [m.next_key_in(flow.project) for m in (Task, Spec, Decision, Task)]

    assert keys == [(1, "FM-1"), (1, "FM-S1"), (1, "FM-D1"), (2, "FM-2")]


@pytest.mark.django_db
def test_an_origin_is_unique_in_its_project_only_when_given(flow, other_flow):
    flow.draft(title="one", origin="beads:x:bd-1")
    flow.draft(title="two")
    flow.draft(title="three")
    other_flow.draft(title="theirs", origin="beads:x:bd-1")

    with pytest.raises(ValidationError, match="origin"):  # the constraint, checked first
        flow.draft(title="again", origin="beads:x:bd-1")
    assert Task.objects.filter(origin="beads:x:bd-1").count() == 2
