"""``projects.rest.validated_by``: a serializer built once validates as one made per request."""

import pytest
from rest_framework import serializers

from projects.rest import validated_by
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
