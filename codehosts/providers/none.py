"""``{"provider": "none"}``: no code host, today's behaviour. Reads answer that nothing is
missing and nothing is followed; a write on the host is a caller's mistake and says so."""

from codehosts.providers.base import Access, Issue, Unconfigured


def _absent(what: str):
    raise Unconfigured(f"this project has no code host to {what}")


class NoHost:
    """The project keeps its code where the site's own lander pushes (``landing.mode:
    push``): there is no pull request, check run, queue or issue to act on."""

    provider = "none"

    def check_access(self) -> Access:
        return Access()

    def issues_with_label(self, label: str, *, state: str = "open") -> list[Issue]:
        return []

    def repository(self):
        _absent("read a repository from")

    def protection(self, branch):
        _absent("read a branch's protection from")

    def open_or_update_pull_request(self, **_):
        _absent("open a pull request on")

    def set_draft(self, pull, draft):
        _absent("change a pull request on")

    def pull_request(self, number):
        _absent("read a pull request from")

    def check_run(self, **_):
        _absent("post a check run to")

    def comment(self, number, body):
        _absent("comment on")

    def review_comment(self, number, **_):
        _absent("comment on lines on")

    def comment_marked(self, number, marker):
        _absent("read comments from")

    def commit_checks(self, sha):
        _absent("read a commit's checks from")

    def merge(self, pull, **_):
        _absent("merge on")

    def update_branch(self, pull, **_):
        _absent("update a branch on")

    def enqueue_pull_request(self, pull, **_):
        _absent("enqueue on")

    def dequeue_pull_request(self, pull):
        _absent("dequeue from")

    def queue_entry(self, number):
        _absent("read a merge queue from")

    def issue(self, number):
        _absent("read an issue from")

    def close_pull_request(self, number, comment):
        _absent("close a pull request on")

    def close_issue(self, number, comment):
        _absent("close an issue on")

    def user(self, login):
        _absent("look an account up on")

    def pushed_by(self, branch, sha):
        _absent("read who pushed to")

    def review_comments(self, number):
        _absent("read the review comments of")

    def open_pull_requests(self, *, task, head):
        _absent("list the pull requests of")
