"""The kinds of evidence: the words a criterion's proof and an evidence file share.

A spec's criterion says which kind proves it (``{"check": "evidence", "kind": "screenshot"}``)
and an evidence file is of one kind; both apps read the same list from here.
"""

from django.db import models


class Kind(models.TextChoices):
    JUNIT = "junit", "JUnit XML report"
    COVERAGE = "coverage", "Cobertura coverage report"
    DIFF = "diff", "Unified diff"
    LOG = "log", "Log"
    SCREENSHOT = "screenshot", "Screenshot"
    JSON = "json", "JSON document"
    NOTE = "note", "Note"
    LINK = "link", "Link"
