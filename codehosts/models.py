"""What a code host told the site: its webhook deliveries, kept once each; and which of
the host's accounts is which person here."""

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from projects.models import Project
from tasks.models import LineComment, Task


class HostDelivery(models.Model):
    """A webhook delivery whose signature matched the secret of the project following its
    repository (``codehosts.services.delivery_receive``).

    Kept once per delivery id: GitHub's manual redelivery reuses the id, so a delivery
    received twice is skipped. The id is not signed, so a captured body sent again under
    another id is kept again; acting on a delivery re-reads the object from the host, so
    the same body twice comes to the same result. No secret and not the body are kept:
    the body's SHA-256, and what names the object it is about (``subject``).
    """

    provider = models.CharField(max_length=20)
    delivery_id = models.CharField(max_length=100, help_text="X-GitHub-Delivery: a GUID.")
    event = models.CharField(max_length=100, help_text="X-GitHub-Event: pull_request, issues…")
    action = models.CharField(max_length=100, blank=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="host_deliveries")
    subject = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the delivery is about, to re-read from the host: the repository, "
        "a pull request's or an issue's number, a commit.",
    )
    body_sha256 = models.CharField(max_length=64)
    received_at = models.DateTimeField(default=timezone.now, editable=False)
    processed_at = models.DateTimeField(
        null=True, blank=True, help_text="When acting on it finished (empty: not yet)."
    )
    result = models.CharField(
        max_length=200, blank=True, help_text="What acting on it did, in words."
    )
    error = models.TextField(
        blank=True, help_text="Why acting on it failed (the host's words); retried by the sweep."
    )

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-received_at", "-id"]
        # The lander waiting for checks asks for a project's news since a moment, often.
        indexes = [models.Index(fields=["project", "received_at"], name="codehosts_delivery_news")]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "delivery_id"], name="host_delivery_once_per_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.event}.{self.action} {self.delivery_id}"


class TaskPullRequest(models.Model):
    """A task's pull request on its project's code host, and what the site posted there.

    One per task: every attempt's branch goes to the same pull request while it is open,
    found on the host by the task's marker in its body, never by its number alone. What
    was posted (``posted``: the check runs' ids by attempt and gate, the review's check
    run and comment; under ``lines``, each reviewer's line comment by its id, as a review
    comment or, when the lines could not carry it, a plain comment and why) lets a job run
    again without posting twice. Written only by ``codehosts.pulls`` and
    ``codehosts.line_comments``, from jobs, after the change it shows committed.
    """

    task = models.OneToOneField(Task, on_delete=models.CASCADE, related_name="pull_request")
    number = models.PositiveIntegerField()
    url = models.URLField(max_length=500)
    head_sha = models.CharField(max_length=64, blank=True)
    draft = models.BooleanField(default=True)
    posted = models.JSONField(
        default=dict,
        blank=True,
        help_text='What was posted for each attempt: {"2": {"checks": {gate: {id, state}}, '
        '"review": id, "comment": id}}, and for each line comment: {"lines": {"7": {"as": '
        '"review" or "comment", "id", "url", "why"}}}.',
    )
    synced_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.task.key} → #{self.number}"

    def record(self, merge) -> None:
        """Change what was posted, ``merge(posted) -> posted``, under the row's lock and on
        what is there now: the pull request's sync, each line comment's post and each
        push's answer record on the same row, possibly at the same time."""
        with transaction.atomic():
            locked = type(self).objects.select_for_update(no_key=True, of=("self",)).get(pk=self.pk)
            locked.posted = merge(locked.posted)
            locked.save(update_fields=["posted"])
            self.posted = locked.posted


class TaskIssue(models.Model):
    """A task made from an issue the project follows by label (``codehosts.issues``).

    The task itself carries the issue's origin (``github:owner/name#12``), by which a
    re-sync finds it; this row keeps what the host last said of the issue and what the
    site posted there, so closing it after the task landed comments once however often
    the job runs. Written only by ``codehosts.issues``, from jobs.
    """

    task = models.OneToOneField(Task, on_delete=models.CASCADE, related_name="issue")
    number = models.PositiveIntegerField()
    url = models.URLField(max_length=500)
    author = models.CharField(max_length=100, blank=True, help_text="The issue's author's login.")
    state = models.CharField(max_length=20, help_text="open or closed, as the host last said.")
    labelled = models.BooleanField(
        default=True, help_text="Whether it carried the project's label when last read."
    )
    followed = models.BooleanField(
        default=True,
        help_text="Whether edits on the host still reach the task (no longer once the label "
        "is removed or the issue closed while the task was in hand).",
    )
    close_comment = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The comment naming the landed commit, once posted."
    )
    closed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the site closed it after the task landed."
    )
    synced_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.task.key} ← #{self.number}"


class HostAccount(models.Model):
    """An account on the project's code host that is a member of the project here.

    Found by the host's number for the account (``host_id``), never by its login: a login
    can be renamed and then taken by someone else, the number stays with the person. One
    row per account and project, so linking in one project says nothing in another. Written
    only by ``codehosts.identities`` (``host_account_link``, ``host_account_unlink``), each
    an Event; a manager links, and the user is a member of the project when linked. An
    account known through single sign-on (``FACTORY_CODE_HOST_SSO_ISSUER``) has no row: it
    is found when asked, so the provider's word is always the current one. Read through
    ``codehosts.identities.user_for``.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="host_accounts")
    host_id = models.PositiveBigIntegerField(help_text="The host's number for the account.")
    login = models.CharField(max_length=39, help_text="Its login when the host last said it.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="host_accounts"
    )
    linked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The manager who linked it.",
    )
    linked_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["login", "host_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "host_id"], name="host_account_once_per_project"
            )
        ]

    def __str__(self) -> str:
        return f"{self.login} ({self.host_id})"

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None


class LineCommentReply(models.Model):
    """A reply on the code host in the thread of a reviewer's line comment that the site
    posted there, as the host showed it when last read (``codehosts.line_comments
    .line_comment_replies_sync``): edited there, it is edited here; deleted there, it is
    deleted here. Its author is the host's account, shown as the member it is linked to
    or as the host's login (``identities.shown``), never as anyone here otherwise; its
    text is theirs, quoted on the task's page, never the site's word.
    """

    comment = models.ForeignKey(LineComment, on_delete=models.CASCADE, related_name="+")
    host_id = models.PositiveBigIntegerField(help_text="The host's number for the reply.")
    author_login = models.CharField(max_length=39)
    author_host_id = models.PositiveBigIntegerField(null=True, blank=True)
    body = models.TextField()
    url = models.URLField(max_length=500, blank=True)
    written_at = models.DateTimeField(null=True, blank=True, help_text="As the host said.")
    read_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "line comment replies"
        ordering = ["comment", "host_id"]
        constraints = [
            models.UniqueConstraint(fields=["comment", "host_id"], name="line_reply_once")
        ]

    def __str__(self) -> str:
        return f"{self.comment} ← {self.author_login} ({self.host_id})"
