"""The GitHub provider against the stand-in: each call of the seam does what GitHub would
make of it, and each refusal GitHub makes comes back as the seam's error with GitHub's
words, with nothing changed on the host."""

import pytest

from codehosts.providers import (
    Annotation,
    Forbidden,
    Protection,
    Refused,
    Repository,
)
from tests.github_standin.world import Check, Issue, Pull, Review
from tests.github_standin.world import Protection as Rules

TASK = "WID-7"


def opened(host, repo, *, draft=False, branch="fm/WID-7"):
    repo.git.commit(branch, {"widget.py": "x = 1\n"}, "the change", start="main")
    return host.open_or_update_pull_request(
        task=TASK, head=branch, base="main", title="Widgets", body="What changed", draft=draft
    )


def green(repo, sha, name="ci"):
    check = Check(len(repo.checks) + 1, "CR", name, sha, "completed", "success", None)
    repo.checks[check.id] = check


def test_the_repository_is_read_as_the_apps_installation(github, repo, installation, app_host):
    assert app_host.repository() == Repository("octo-org/widgets", "main", f"R_{repo.id}", True)
    assert github.calls() == [
        f"POST /app/installations/{installation.id}/access_tokens 201",
        "GET /repos/octo-org/widgets 200",
    ]


def test_protection_reads_the_required_checks_strictness_reviews_and_merge_queue(repo, app_host):
    repo.protect("main", Rules(["ci", "lint"], strict=True, merge_queue=True, required_reviews=1))

    assert app_host.protection("main") == Protection(
        "main", True, ("ci", "lint"), strict=True, required_reviews=1, merge_queue=True
    )
    assert app_host.protection("dev") == Protection("dev", False)


def test_a_pull_request_is_opened_once_then_updated(repo, app_host):
    first = opened(app_host, repo, draft=True)
    again = app_host.open_or_update_pull_request(
        task=TASK, head="fm/WID-7", base="main", title="Widgets, v2", body="More", draft=True
    )

    assert (first.number, again.number) == (1, 1)
    assert list(repo.pulls) == [1]
    assert repo.pulls[1].title == "Widgets, v2"
    assert repo.pulls[1].body == "More\n\n<!-- factory-memory:task WID-7 -->"
    assert (again.draft, again.head_sha, again.author) == (
        True,
        repo.git.head("fm/WID-7"),
        "factory-memory[bot]",
    )


def test_a_body_longer_than_github_takes_is_cut_saying_so_and_keeps_the_marker(repo, app_host):
    repo.git.commit("fm/WID-7", {"widget.py": "x = 1\n"}, "the change", start="main")

    app_host.open_or_update_pull_request(
        task=TASK, head="fm/WID-7", base="main", title="W", body="x" * 1_000_000, draft=False
    )

    body = repo.pulls[1].body
    assert len(body) == 65_536
    assert body.endswith(
        "the whole text is on the task's page)\n\n<!-- factory-memory:task WID-7 -->"
    )


def test_an_open_pull_request_from_the_branch_that_is_not_the_tasks_is_not_taken(repo, app_host):
    repo.git.commit("fm/WID-7", {"a.py": "a\n"}, "a person's", start="main")
    repo.pulls[1] = Pull(1, "PR_x_1", "fm/WID-7", "main", "Mine", "a person's", False, "ann")

    with pytest.raises(Refused) as refused:
        opened(app_host, repo)

    assert refused.value.detail == "pull request #1 from fm/WID-7 is not task WID-7's"
    assert (repo.pulls[1].title, repo.pulls[1].body) == ("Mine", "a person's")


def test_a_draft_is_made_ready_and_back(repo, app_host):
    pull = opened(app_host, repo, draft=True)

    ready = app_host.set_draft(pull, False)
    draft = app_host.set_draft(ready, True)

    assert (pull.draft, ready.draft, draft.draft) == (True, False, True)
    assert repo.pulls[1].draft is True


def test_a_check_run_carries_every_annotation_past_githubs_fifty_per_request(
    github, repo, app_host
):
    sha = repo.git.head("main")
    notes = tuple(
        Annotation("tests/test_a.py", n, n, "failure", f"failed {n}") for n in range(1, 121)
    )

    run = app_host.check_run(
        name="factory-memory/tests",
        head_sha=sha,
        status="completed",
        conclusion="failure",
        summary="3 of 120 failed",
        annotations=notes,
    )

    stored = repo.checks[run.id]
    assert (run.status, run.conclusion, run.head_sha) == ("completed", "failure", sha)
    assert [a["message"] for a in stored.annotations] == [f"failed {n}" for n in range(1, 121)]
    assert [c for c in github.calls() if "check-runs" in c] == [
        "POST /repos/octo-org/widgets/check-runs 201",
        f"PATCH /repos/octo-org/widgets/check-runs/{run.id} 200",
        f"PATCH /repos/octo-org/widgets/check-runs/{run.id} 200",
    ]


def test_a_check_run_is_updated_in_place(repo, app_host):
    sha = repo.git.head("main")
    queued = app_host.check_run(name="factory-memory/review", head_sha=sha, status="in_progress")

    done = app_host.check_run(
        name="factory-memory/review",
        head_sha=sha,
        status="completed",
        conclusion="success",
        summary="approved by rita",
        check_run_id=queued.id,
    )

    assert (queued.status, done.id, done.conclusion) == ("in_progress", queued.id, "success")
    assert repo.checks[queued.id].output["summary"] == "approved by rita"


def test_a_comment_is_posted_as_the_app(repo, app_host):
    pull = opened(app_host, repo)

    app_host.comment(pull.number, "Approved by rita")

    assert [(c.issue, c.body, c.user) for c in repo.comments] == [
        (1, "Approved by rita", "factory-memory[bot]")
    ]


def test_a_merge_pinned_to_the_head_lands_that_head(repo, app_host):
    pull = opened(app_host, repo)
    repo.protect("main", Rules(["ci"]))
    green(repo, pull.head_sha)

    merged = app_host.merge(pull, sha=pull.head_sha)

    assert repo.git.head("main") == merged.sha
    assert repo.git.contains(pull.head_sha, merged.sha)
    assert app_host.pull_request(pull.number).merged is True


def test_a_squash_merge_keeps_the_title_and_message_it_is_given(repo, app_host):
    pull = opened(app_host, repo)

    merged = app_host.merge(
        pull,
        sha=pull.head_sha,
        method="squash",
        title="WID-7: Widgets",
        message="Factory-Task: WID-7",
    )

    assert repo.git.git("log", "-1", "--format=%B", merged.sha) == (
        "WID-7: Widgets\n\nFactory-Task: WID-7"
    )
    assert repo.git.git("rev-parse", f"{merged.sha}^@") == repo.git.git("rev-parse", "main^")


def test_a_commits_checks_are_its_check_runs_and_statuses_the_latest_run_of_a_name_counting(
    repo, app_host
):
    sha = repo.git.head("main")
    for number, name, status, conclusion in [
        (1, "ci", "completed", "failure"),
        (2, "ci", "completed", "success"),  # re-run: the latest counts
        (3, "lint", "in_progress", None),
    ]:
        repo.checks[number] = Check(number, f"CR{number}", name, sha, status, conclusion, None)
    repo.statuses += [
        (sha, "deploy", "error"),
        (sha, "docs", "pending"),
        ("f" * 40, "x", "success"),
    ]

    assert app_host.commit_checks(sha) == {
        "ci": "success",
        "lint": "pending",
        "deploy": "error",
        "docs": "pending",
    }
    assert app_host.commit_checks(opened(app_host, repo).head_sha) == {}


def test_a_merge_pinned_to_a_head_that_moved_is_refused_and_nothing_lands(repo, app_host):
    pull = opened(app_host, repo)
    tip = repo.git.head("main")
    repo.git.commit("fm/WID-7", {"late.py": "pushed after approval\n"}, "a person's push")

    with pytest.raises(Refused) as refused:
        app_host.merge(pull, sha=pull.head_sha)

    assert (refused.value.status, refused.value.detail) == (
        409,
        "Head branch was modified. Review and try the merge again. (409)",
    )
    assert repo.git.head("main") == tip
    assert repo.pulls[1].merged is False


@pytest.mark.parametrize("state", ["missing", "failing", "running"])
def test_a_merge_whose_required_check_is_not_green_is_refused(repo, app_host, state):
    pull = opened(app_host, repo)
    repo.protect("main", Rules(["ci"]))
    tip = repo.git.head("main")
    if state != "missing":
        status, conclusion = (
            ("completed", "failure") if state == "failing" else ("in_progress", None)
        )
        repo.checks[1] = Check(1, "CR", "ci", pull.head_sha, status, conclusion, None)

    with pytest.raises(Refused) as refused:
        app_host.merge(pull, sha=pull.head_sha)

    word = {"missing": "expected", "failing": "failure", "running": "expected"}[state]
    assert (refused.value.status, refused.value.detail) == (
        405,
        f'Required status check "ci" is {word}. (405)',
    )
    assert repo.git.head("main") == tip


def test_a_branch_behind_its_strict_target_is_refused_until_updated(repo, app_host):
    pull = opened(app_host, repo)
    repo.protect("main", Rules([], strict=True))
    repo.git.commit("main", {"other.py": "moved\n"}, "the target moved")
    tip = repo.git.head("main")

    with pytest.raises(Refused) as refused:
        app_host.merge(pull, sha=pull.head_sha)
    app_host.update_branch(pull, expected_head_sha=pull.head_sha)
    updated = app_host.pull_request(pull.number)
    merged = app_host.merge(updated, sha=updated.head_sha)

    assert (
        refused.value.detail == "Head branch is out of date. Review and try the merge again. (405)"
    )
    assert repo.git.contains(tip, updated.head_sha)
    assert repo.git.head("main") == merged.sha


def test_updating_a_branch_from_a_head_that_moved_is_refused(repo, app_host):
    pull = opened(app_host, repo)
    repo.git.commit("main", {"other.py": "moved\n"}, "the target moved")
    repo.git.commit("fm/WID-7", {"late.py": "late\n"}, "a person's push")
    head = repo.git.head("fm/WID-7")

    with pytest.raises(Refused) as refused:
        app_host.update_branch(pull, expected_head_sha=pull.head_sha)

    assert refused.value.status == 422
    assert repo.git.head("fm/WID-7") == head


def test_an_apps_approval_does_not_count_as_a_required_review(repo, app_host):
    pull = opened(app_host, repo)
    repo.protect("main", Rules([], required_reviews=1))
    repo.pulls[1].reviews.append(Review("factory-memory[bot]", True, "APPROVED", pull.head_sha))
    tip = repo.git.head("main")

    with pytest.raises(Refused) as refused:
        app_host.merge(pull, sha=pull.head_sha)
    repo.pulls[1].reviews.append(Review("rita", False, "APPROVED", pull.head_sha))
    merged = app_host.merge(pull, sha=pull.head_sha)

    assert refused.value.detail.startswith("At least 1 approving review is required")
    assert repo.git.contains(tip, merged.sha)


def test_a_pull_request_is_queued_and_dequeued_through_graphql(repo, app_host):
    repo.protect("main", Rules(["ci"], merge_queue=True))
    pull = opened(app_host, repo)

    entry = app_host.enqueue_pull_request(pull, expected_head_sha=pull.head_sha)
    queued = repo.pulls[1].queued
    group = app_host.queue_entry(1)
    left = app_host.dequeue_pull_request(pull)

    # The stand-in builds the merge group at once: the entry awaits its checks.
    assert (entry.position, entry.state, queued) == (1, "AWAITING_CHECKS", True)
    assert (group.id, group.base_sha) == (entry.id, repo.git.head("main"))
    assert repo.git.git("rev-parse", f"{group.head_sha}^2") == pull.head_sha
    assert (left.id, repo.pulls[1].queued, app_host.queue_entry(1)) == (entry.id, False, None)


def test_a_pull_request_is_not_queued_where_the_target_has_no_queue_or_its_head_moved(
    repo, app_host
):
    pull = opened(app_host, repo)

    with pytest.raises(Refused) as no_queue:
        app_host.enqueue_pull_request(pull, expected_head_sha=pull.head_sha)
    repo.protect("main", Rules([], merge_queue=True))
    with pytest.raises(Refused) as moved:
        app_host.enqueue_pull_request(pull, expected_head_sha="0" * 40)

    assert "merge queue" in no_queue.value.detail
    assert moved.value.detail == "Head ref has been modified since expectedHeadOid"
    assert repo.pulls[1].queued is False


def test_a_merge_where_the_target_has_a_queue_is_refused(repo, app_host):
    pull = opened(app_host, repo)
    repo.protect("main", Rules([], merge_queue=True))

    with pytest.raises(Refused) as refused:
        app_host.merge(pull, sha=pull.head_sha)

    assert refused.value.detail == "Changes must be made through the merge queue (405)"
    assert repo.pulls[1].merged is False


def test_labelled_issues_are_read_page_after_page(github, repo, app_host):
    app_host.page_size = 2
    for number in range(1, 6):
        repo.issues[number] = Issue(
            number, f"I_{number}", f"Issue {number}", "b", ["factory"], "ann"
        )
    repo.issues[6] = Issue(6, "I_6", "Unlabelled", "b", ["bug"], "ann")

    found = app_host.issues_with_label("factory")

    assert [i.number for i in found] == [5, 4, 3, 2, 1]
    assert found[0].labels == ("factory",)
    assert [c for c in github.calls() if "/issues" in c] == [
        "GET /repos/octo-org/widgets/issues 200"
    ] * 3


def test_an_issue_is_read_and_closed_with_a_comment(repo, app_host):
    repo.issues[3] = Issue(3, "I_3", "Widgets", "- [ ] spin", ["factory"], "ann")

    read = app_host.issue(3)
    closed = app_host.close_issue(3, "Landed in abc123")

    assert (read.title, read.body, read.state, read.author) == (
        "Widgets",
        "- [ ] spin",
        "open",
        "ann",
    )
    assert closed.state == "closed"
    assert [c.body for c in repo.comments] == ["Landed in abc123"]


def test_a_call_the_installation_may_not_make_names_the_permission(
    github, repo, installation, app_host
):
    installation.permissions["checks"] = "read"

    with pytest.raises(Forbidden) as forbidden:
        app_host.check_run(name="x", head_sha=repo.git.head("main"), status="queued")

    assert forbidden.value.missing == ("checks: write",)
    assert repo.checks == {}
