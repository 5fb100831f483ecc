"""A handler whose error carries secrets, as a careless one would: a webhook signing secret, a
bearer token and the database URL with its password (tests/acceptance/test_cli_secrets.py)."""

from __future__ import annotations

import os

import jobs

WEBHOOK_SECRET = "whsec_PlantedWebhookSecret0123456789"
BEARER = "PlantedBearerToken0123456789abcdef"


def leak(job: jobs.Job) -> None:
    raise jobs.PermanentError(
        f"webhook refused: secret {WEBHOOK_SECRET}, header Authorization: Bearer {BEARER}, "
        f"database {os.environ['DATABASE_URL']}",
        code="leaky",
    )


handlers = {"leak": leak}
