"""Standard Webhooks signatures (https://www.standardwebhooks.com/), in a few lines.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}``; the signature is
``v1,`` and the base64 of its HMAC-SHA256 under the secret's bytes (the base64 after
``whsec_``). Receivers verify with the ``standardwebhooks`` library; the tests do.
"""

import base64
import hashlib
import hmac
import secrets
import time


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


def headers(secret: str, webhook_id: str, body: bytes, *, now: float | None = None) -> dict:
    timestamp = int(now if now is not None else time.time())
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, webhook_id, timestamp, body),
    }
