"""Outbound webhooks from outbox facts (docs/webhooks.md).

- :mod:`.endpoints`: the endpoints of each organization, their secrets and rotation
  (``add_endpoint``, ``list_endpoints``, ``disable_endpoint``, ``enable_endpoint``,
  ``rotate_secret``, ... each with its ``_async`` form);
- :mod:`.fanout`: the outbox projection from a fact to one delivery job per subscribed endpoint
  (``projection``);
- :mod:`.delivery`: the ``webhook.deliver`` batch handler (``WebhookHandler``), redelivery, and
  the worker app (``tockwork worker --app scheduler.webhooks:app``);
- :mod:`.signing`: Standard Webhooks signatures and ``whsec_`` secrets;
- :mod:`.ssrf`: the guard that keeps requests away from internal addresses;
- :mod:`.http`: the HTTP/1.1 client that applies the guard at each connection.
"""

from scheduler.webhooks.delivery import (
    WebhookHandler,
    app,
    redeliver_event,
    redeliver_failed,
)
from scheduler.webhooks.endpoints import (
    DeliveryAttempt,
    Enabled,
    Endpoint,
    NewEndpoint,
    Rotated,
    SecretInfo,
    add_endpoint,
    add_endpoint_async,
    disable_endpoint,
    disable_endpoint_async,
    enable_endpoint,
    enable_endpoint_async,
    endpoint_secrets,
    endpoint_secrets_async,
    get_endpoint,
    get_endpoint_async,
    list_endpoints,
    list_endpoints_async,
    recent_attempts,
    recent_attempts_async,
    remove_endpoint,
    remove_endpoint_async,
    rotate_secret,
    rotate_secret_async,
    set_rate_limit,
    set_rate_limit_async,
)
from scheduler.webhooks.fanout import JOB_TYPE, QUEUE, Fanout, projection
from scheduler.webhooks.signing import generate_secret
from scheduler.webhooks.ssrf import Guard

__all__ = [
    "JOB_TYPE",
    "QUEUE",
    "DeliveryAttempt",
    "Enabled",
    "Endpoint",
    "Fanout",
    "Guard",
    "NewEndpoint",
    "Rotated",
    "SecretInfo",
    "WebhookHandler",
    "add_endpoint",
    "add_endpoint_async",
    "app",
    "disable_endpoint",
    "disable_endpoint_async",
    "enable_endpoint",
    "enable_endpoint_async",
    "endpoint_secrets",
    "endpoint_secrets_async",
    "generate_secret",
    "get_endpoint",
    "get_endpoint_async",
    "list_endpoints",
    "list_endpoints_async",
    "projection",
    "recent_attempts",
    "recent_attempts_async",
    "redeliver_event",
    "redeliver_failed",
    "remove_endpoint",
    "remove_endpoint_async",
    "rotate_secret",
    "rotate_secret_async",
    "set_rate_limit",
    "set_rate_limit_async",
]
