"""``projects.rest.validated_by``: a serializer built once validates as one made per request;
``projects.rest.EditInputMixin``: an edit's input is its creation's fields, none required and
none defaulted; a JSON body's text is refused past its bound as sent, not as trimmed."""

import pytest
from rest_framework import serializers

from projects.rest import EditInputMixin, JSONInputSerializer, ReasonSerializer, validated_by
from tasks.api_attempts import CLAIM_INPUT, TaskClaimApi

BODIES = [
    {},
    {"project": "FM", "labels": ["ui", "api"], "lease_seconds": 60},
    None,
    [],
    "FM",
    7,
    {"project": 7},
    {"project": ""},
    {"labels": "ui"},
    {"labels": ["x" * 51]},
    {"labels": ["l"] * 21},
    {"lease_seconds": "60"},
    {"lease_seconds": True},
    {"unknown": 1, "project": "FM"},
]


def answer_of_a_new_serializer(data):
    serializer = TaskClaimApi.InputSerializer(data=data)
    try:
        serializer.is_valid(raise_exception=True)
    except serializers.ValidationError as exc:
        return ("refused", exc.detail)
    return ("valid", dict(serializer.validated_data))


def answer_of_the_shared_serializer(data):
    try:
        return ("valid", dict(validated_by(CLAIM_INPUT, data)))
    except serializers.ValidationError as exc:
        return ("refused", exc.detail)


@pytest.mark.parametrize("body", BODIES)
def test_a_serializer_built_once_answers_every_body_as_one_made_for_it(body):
    expected = answer_of_a_new_serializer(body)

    assert answer_of_the_shared_serializer(body) == expected
    assert answer_of_the_shared_serializer(body) == expected  # and again: it kept nothing


class Created(JSONInputSerializer):
    title = serializers.CharField(max_length=5, help_text="A title.")
    priority = serializers.IntegerField(required=False, default=0)


class Edited(EditInputMixin, Created):
    edit_help = {"priority": "A new priority."}


def test_an_edit_takes_the_creations_fields_with_none_required_and_no_default():
    created, edited = Created(data={}), Edited(data={})

    assert (created.is_valid(), edited.is_valid()) == (False, True)
    assert edited.validated_data == {}
    assert Created(data={"title": "t"}).is_valid()
    assert not Edited(data={"title": "t" * 6}).is_valid()  # the creation's checks still hold
    assert [(f.help_text, f.required) for f in edited.fields.values()] == [
        ("A title.", False),
        ("A new priority.", False),
    ]
    assert Created().fields["priority"].default == 0


def test_text_longer_than_its_bound_is_refused_before_it_is_trimmed():
    # DRF checks max_length on the trimmed value; the schema's maxLength is of what was
    # sent (schemathesis sent 10,001 characters whose first was a vertical tab).
    padded = ReasonSerializer(data={"reason": "\x0b" + "x" * 10_000})
    exact = ReasonSerializer(data={"reason": "x" * 10_000})

    assert not padded.is_valid()
    assert padded.errors == {"reason": ["Ensure this field has no more than 10000 characters."]}
    assert exact.is_valid(), exact.errors
