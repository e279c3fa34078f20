"""Extract the operations the GitHub provider calls from ``@octokit/openapi`` into
``openapi-subset.json``, with every component they reference (tests/github_standin/README.md).

    cd /tmp && npm pack @octokit/openapi && tar xzf octokit-openapi-*.tgz
    python tests/github_standin/extract.py /tmp/package

Operations are copied unchanged; each carries the SHA-256 of its canonical JSON, which
``tests/codehosts/test_standin_description.py`` recomputes, so a hand edit is found.
Examples are left out (they are not validated and are most of the size).
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUBSET = HERE / "openapi-subset.json"
# (method, path): every REST call codehosts.providers.github makes, and the stand-in answers.
OPERATIONS = [
    ("get", "/app/installations/{installation_id}"),
    ("post", "/app/installations/{installation_id}/access_tokens"),
    ("get", "/repos/{owner}/{repo}"),
    ("get", "/repos/{owner}/{repo}/activity"),
    ("get", "/repos/{owner}/{repo}/branches/{branch}/protection"),
    ("get", "/repos/{owner}/{repo}/rules/branches/{branch}"),
    ("get", "/repos/{owner}/{repo}/pulls"),
    ("post", "/repos/{owner}/{repo}/pulls"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("patch", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("put", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    ("put", "/repos/{owner}/{repo}/pulls/{pull_number}/update-branch"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"),
    ("post", "/repos/{owner}/{repo}/check-runs"),
    ("patch", "/repos/{owner}/{repo}/check-runs/{check_run_id}"),
    ("get", "/repos/{owner}/{repo}/issues"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("patch", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("get", "/users/{username}"),
]


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def digest(operation: dict) -> str:
    return hashlib.sha256(canonical(operation)).hexdigest()


def references(value, found: set[str]) -> None:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/") and ref not in found:
            found.add(ref)
        for key, item in value.items():
            if key != "examples":
                references(item, found)
    elif isinstance(value, list):
        for item in value:
            references(item, found)


def resolve(document: dict, ref: str):
    node = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def extract(package: Path) -> dict:
    document = json.loads((package / "generated" / "api.github.com.json").read_text())
    version = json.loads((package / "package.json").read_text())["version"]
    paths: dict = {}
    for method, path in OPERATIONS:
        paths.setdefault(path, {})[method] = document["paths"][path][method]
    found: set[str] = set()
    references(paths, found)
    pending = list(found)
    while pending:
        before = set(found)
        references(resolve(document, pending.pop()), found)
        pending.extend(found - before)
    components: dict = {}
    for ref in sorted(found):
        _, _, kind, name = ref.split("/", 3)
        if kind != "examples":
            components.setdefault(kind, {})[name] = resolve(document, ref)
    return {
        "openapi": document["openapi"],
        "info": {
            **document["info"],
            "x-extracted-from": f"@octokit/openapi@{version} generated/api.github.com.json",
        },
        "x-operation-sha256": {
            f"{method.upper()} {path}": digest(paths[path][method]) for method, path in OPERATIONS
        },
        "paths": paths,
        "components": components,
    }


if __name__ == "__main__":
    subset = extract(Path(sys.argv[1]))
    SUBSET.write_text(json.dumps(subset, indent=1, sort_keys=True) + "\n")
    print(f"{SUBSET}: {len(OPERATIONS)} operations, {SUBSET.stat().st_size} bytes")
