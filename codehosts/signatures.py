"""GitHub's webhook signature: ``X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body>``.

Compared in constant time against every secret in force (two while one is rotated).
"""

import hashlib
import hmac


def signed_by(body: bytes, header: str, secrets: list[str]) -> bool:
    """Whether ``header`` is the signature of ``body`` under one of ``secrets``."""
    given = header.encode("utf-8", "replace")
    matched = False
    for secret in secrets:
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        # Every secret is tried, so the time taken says nothing about which one matched.
        matched |= hmac.compare_digest(expected.encode(), given)
    return matched
