"""GitHub's REST description (the committed subset of ``@octokit/openapi``), and the checks
the stand-in makes with it on every exchange.

Schemas are checked with ``openapi-schema-validator``'s ``OAS30Validator`` (jsonschema with
OpenAPI 3.0's ``nullable`` and formats), not openapi-core: openapi-core would build its
model of the whole description and validate through its own request and response
wrappers, where the stand-in needs only "this operation, this body, this status"
(README.md).
"""

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jsonschema.exceptions import best_match
from openapi_schema_validator import OAS30Validator, oas30_format_checker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

SUBSET = Path(__file__).resolve().parent / "openapi-subset.json"
BASE = "urn:github-openapi-subset"
# The description lists no 401, 422, 429 or 5xx for most operations, though GitHub sends them on
# any (a bad token, a rate limit, a bad gateway); the stand-in's are checked as basic-error.
ANY_OPERATION = {"401", "403", "422", "429", "500", "502", "503", "504"}


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    pattern: re.Pattern
    spec: dict

    @property
    def name(self) -> str:
        return f"{self.method.upper()} {self.template}"


def pointer(*parts: str) -> str:
    return "/".join(part.replace("~", "~0").replace("/", "~1") for part in parts)


class Description:
    """The operations of the subset, found by method and path, and their schemas."""

    def __init__(self, document: dict):
        self.document = null_in_enums(document)
        self._validators: dict = {}
        self._skeletons: dict = {}
        self.registry = Registry().with_resource(
            BASE, Resource(contents=self.document, specification=DRAFT4)
        )
        self.operations = []
        for template, methods in self.document["paths"].items():
            regex = re.sub(r"\\\{[a-z_]+\\\}", "([^/]+)", re.escape(template))
            names = re.findall(r"\{([a-z_]+)\}", template)
            for method, spec in methods.items():
                operation = Operation(method, template, re.compile(f"^{regex}$"), spec)
                object.__setattr__(operation, "names", names)
                self.operations.append(operation)

    def find(self, method: str, path: str) -> tuple[Operation | None, dict]:
        for operation in self.operations:
            found = operation.pattern.match(path)
            if found and operation.method == method.lower():
                return operation, dict(zip(operation.names, found.groups(), strict=True))
        return None, {}

    def resolve(self, node: dict) -> dict:
        while isinstance(node, dict) and "$ref" in node:
            node = self.at(node["$ref"])
        return node

    def at(self, ref: str):
        node = self.document
        for part in ref.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def errors(self, ref: str, instance) -> list[str]:
        """Why ``instance`` does not match the schema at ``ref`` (a JSON pointer)."""
        validator = self._validators.get(ref)
        if validator is None:
            validator = self._validators[ref] = OAS30Validator(
                {"$ref": f"{BASE}#{ref}"},
                registry=self.registry,
                format_checker=oas30_format_checker,
            )
        error = best_match(validator.iter_errors(instance))
        if error is None:
            return []
        where = "/".join(str(part) for part in error.absolute_path)
        return [f"{where or '(body)'}: {error.message[:300]}"]

    def check_request(self, operation: Operation, query: dict, body) -> list[str]:
        """What in a request the operation does not describe: an unknown or ill-typed query
        parameter, a missing or wrong body."""
        problems = []
        spec = operation.spec
        parameters = [self.resolve(parameter) for parameter in spec.get("parameters", [])]
        known = {p["name"]: p for p in parameters if p["in"] == "query"}
        pointers = {}
        for index, parameter in enumerate(spec.get("parameters", [])):
            pointers[self.resolve(parameter)["name"]] = (
                parameter["$ref"].removeprefix("#")
                if "$ref" in parameter
                else "/"
                + pointer("paths", operation.template, operation.method, "parameters")
                + f"/{index}"
            )
        for name, value in query.items():
            if name not in known:
                problems.append(f"query parameter {name!r} is not in the description")
                continue
            coerced = coerce(value, self.resolve(known[name].get("schema", {})))
            problems += [
                f"query parameter {name}: {p}"
                for p in self.errors(pointers[name] + "/schema", coerced)
            ]
        request_body = self.resolve(spec.get("requestBody", {}))
        if body is None:
            if request_body.get("required"):
                problems.append("the operation requires a body")
        elif not request_body:
            problems.append("the operation takes no body")
        else:
            ref = "/" + pointer(
                "paths",
                operation.template,
                operation.method,
                "requestBody",
                "content",
                "application/json",
                "schema",
            )
            problems += [f"request {p}" for p in self.errors(ref, body)]
        return problems

    def check_response(self, operation: Operation, status: int, body) -> list[str]:
        """Whether the operation lists this status, and the body matches its schema."""
        responses = operation.spec["responses"]
        code = str(status)
        if code not in responses:
            if code in ANY_OPERATION:
                return [
                    f"response {p}" for p in self.errors("/components/schemas/basic-error", body)
                ]
            return [f"status {status} is not a response of {operation.name}"]
        response = responses[code]
        base = (
            response["$ref"].removeprefix("#")
            if "$ref" in response
            else "/" + pointer("paths", operation.template, operation.method, "responses", code)
        )
        content = self.resolve(response).get("content", {})
        if "application/json" not in content:
            return [] if body is None else [f"status {status} of {operation.name} has no body"]
        if body is None:
            return [f"status {status} of {operation.name} needs a body"]
        ref = base + "/" + pointer("content", "application/json", "schema")
        return [f"response {p}" for p in self.errors(ref, body)]


def skeleton(description: Description, schema, depth: int = 0):
    """The smallest instance of ``schema``: its required properties only, each the first
    value its type allows (null where it may be null). The stand-in lays its own state
    over it, so what GitHub always sends is present and the rest is honest emptiness."""
    schema = description.resolve(schema)
    if depth > 30:
        raise RecursionError("the schema nests deeper than a response does")
    if "allOf" in schema:
        merged: dict = {}
        for part in schema["allOf"]:
            value = skeleton(description, part, depth + 1)
            if isinstance(value, dict):
                merged.update(value)
        return merged
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return skeleton(description, schema[key][0], depth + 1)
    if schema.get("nullable") and depth > 0:
        return None
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {
            name: skeleton(description, schema["properties"][name], depth + 1)
            for name in schema.get("required", [])
        }
    if kind == "array":
        return []
    if kind == "integer" or kind == "number":
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "string":
        return {
            "date-time": "2026-01-01T00:00:00Z",
            "uri": "https://standin.invalid/",
            "uri-template": "https://standin.invalid/",
            "email": "nobody@standin.invalid",
        }.get(schema.get("format"), "")
    return None


def overlay(base, values):
    """``values`` laid over ``base``: objects merged key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(values, dict):
        merged = dict(base)
        for key, value in values.items():
            merged[key] = overlay(base.get(key), value) if key in base else value
        return merged
    return values


def null_in_enums(node):
    """GitHub's description marks fields ``nullable`` with an ``enum`` that lacks null
    (a check run's ``conclusion``), and GitHub sends null in them; OpenAPI 3.0.3 reads that
    as "null not allowed", 3.0.0 as allowed. The stand-in reads it as GitHub sends it."""
    if isinstance(node, dict):
        fixed = {key: null_in_enums(value) for key, value in node.items()}
        if fixed.get("nullable") is True and "enum" in fixed and None not in fixed["enum"]:
            fixed["enum"] = [*fixed["enum"], None]
        return fixed
    if isinstance(node, list):
        return [null_in_enums(item) for item in node]
    return node


def coerce(value: str, schema: dict):
    kind = schema.get("type")
    if kind == "integer":
        return int(value) if re.fullmatch(r"-?[0-9]+", value) else value
    if kind == "boolean":
        return {"true": True, "false": False}.get(value, value)
    return value


@cache
def description() -> Description:
    return Description(json.loads(SUBSET.read_text()))
