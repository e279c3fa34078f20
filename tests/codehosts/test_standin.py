"""The stand-in itself: its description is GitHub's, unchanged; its checks bite (a call
GitHub does not have, a body GitHub would refuse, an answer GitHub would not give, a
GraphQL document the schema does not allow are each recorded as violations); and it
refuses a direct push to a protected branch as GitHub does."""

import json
import subprocess
import time

import httpx
import jwt
import pytest

from tests.codehosts.conftest import APP_ID
from tests.github_standin import app_key, extract
from tests.github_standin.description import description
from tests.github_standin.rest import ROUTES
from tests.github_standin.world import Protection


@pytest.fixture
def token(github, repo):
    return github.world.personal_token("ann", admin=True)


def call(github, token, method, path, **kwargs):
    headers = {"Authorization": f"token {token}"}
    return httpx.request(method, github.url + path, headers=headers, timeout=10, **kwargs)


def test_the_subset_holds_githubs_operations_unchanged():
    subset = json.loads(extract.SUBSET.read_text())
    operations = {
        f"{method.upper()} {path}": operation
        for path, methods in subset["paths"].items()
        for method, operation in methods.items()
    }

    assert {name: extract.digest(op) for name, op in operations.items()} == subset[
        "x-operation-sha256"
    ]
    assert sorted(operations) == sorted(ROUTES)
    assert subset["info"]["x-extracted-from"].startswith("@octokit/openapi@")


def test_a_call_github_does_not_have_is_a_violation(github, token):
    answer = call(github, token, "GET", "/repos/octo-org/widgets/secrets")

    assert answer.status_code == 404
    assert github.violations == [
        "GET /repos/octo-org/widgets/secrets: no such operation in GitHub's description"
    ]
    github.violations.clear()


def test_a_body_github_would_refuse_is_a_violation(github, token, repo):
    answer = call(
        github,
        token,
        "POST",
        "/repos/octo-org/widgets/check-runs",
        json={"name": "ci", "head_sha": 7},
    )

    assert answer.status_code == 422
    assert github.violations == [
        "POST /repos/{owner}/{repo}/check-runs: request head_sha: 7 is not of type 'string'"
    ]
    assert repo.checks == {}
    github.violations.clear()


def test_a_query_parameter_github_does_not_take_is_a_violation(github, token):
    call(
        github,
        token,
        "GET",
        "/repos/octo-org/widgets/issues",
        params={"labels": "x", "sort_by": "age"},
    )

    assert github.violations == [
        "GET /repos/{owner}/{repo}/issues: query parameter 'sort_by' is not in the description"
    ]
    github.violations.clear()


def test_an_answer_github_would_not_give_is_caught():
    operation, _ = description().find("PUT", "/repos/o/r/pulls/1/merge")

    assert description().check_response(operation, 200, {"sha": "abc"}) == [
        "response (body): 'merged' is a required property"
    ]
    assert description().check_response(operation, 418, {"message": "teapot"}) == [
        "status 418 is not a response of PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge"
    ]


def test_a_graphql_document_the_schema_does_not_allow_is_a_violation(github, token, repo):
    query = 'mutation { enqueuePullRequest(input: {pullRequestId: "x", jumpToFront: true}) { id } }'

    answer = call(github, token, "POST", "/graphql", json={"query": query})

    assert "errors" in answer.json()
    assert len(github.violations) == 2
    assert all(v.startswith("POST /graphql: GraphQL: ") for v in github.violations)
    github.violations.clear()


def test_a_direct_push_to_a_protected_branch_is_refused(github, repo, tmp_path):
    repo.protect("main", Protection(["ci"]))
    tip = repo.git.head("main")
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(repo.git.path), str(work)], check=True)
    (work / "sneak.py").write_text("print('around the review')\n")
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(["git", "-C", str(work), "add", "."], check=True)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "sneak"], check=True, env=env)

    pushed = subprocess.run(
        ["git", "-C", str(work), "push", "origin", "HEAD:main"], capture_output=True, text=True
    )
    other = subprocess.run(
        ["git", "-C", str(work), "push", "origin", "HEAD:fm/WID-1"], capture_output=True, text=True
    )

    assert pushed.returncode != 0
    assert "GH006: Protected branch update failed for refs/heads/main." in pushed.stderr
    assert repo.git.head("main") == tip
    assert other.returncode == 0


def test_a_jwt_not_signed_by_the_apps_key_mints_no_token(github, installation):
    now = int(time.time())
    claims = {"iss": str(APP_ID), "iat": now - 60, "exp": now + 540}
    forged = jwt.encode(claims, app_key("forger")[0], algorithm="RS256")
    signed = jwt.encode(claims, app_key()[0], algorithm="RS256")
    path = f"/app/installations/{installation.id}/access_tokens"

    refused = httpx.post(github.url + path, headers={"Authorization": f"Bearer {forged}"})
    minted = httpx.post(github.url + path, headers={"Authorization": f"Bearer {signed}"})

    assert (refused.status_code, refused.json()["message"]) == (401, "Bad credentials")
    assert minted.status_code == 201
    assert list(github.world.tokens) == [minted.json()["token"]]
