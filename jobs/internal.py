"""What ``scheduler`` (the composition root) uses of ``jobs`` beyond its public API.

For ``scheduler`` only: not a stable API, and applications should not import it. Everything an
application calls is in ``jobs.__all__`` (and in the public modules listed there: ``outbox``,
``limits``, ``effects``, ``metrics``, ``maintenance``, ``tracing``). What is here are the
building blocks the scheduler's services and CLI are made of: enqueue without validation (input
checked earlier), the input validators, the one loader of named SQL, the array parameters'
encoders (:mod:`jobs.arrays`: the delivery's batches), the logging set-up and the
redaction of secrets (:mod:`jobs.redaction`), the connection settings the CLI reads (and the
other names of UTC: the delivery's sessions), the worker process's garbage collector, the
drivers of operations written as steps (and the supersede of jobs as a step), the fields of a
service's config (to build the CLI's options from) and what declares one (``setting``,
``merged``), the migration check, and the names of services and spans.
``tests/unit/test_layering.py`` checks that ``scheduler`` imports of ``jobs`` only its public API
and this module, that every name here is one ``scheduler`` uses (and none is also public), and
that ``jobs``, ``timezones`` and the examples do not import it (tests and benches may).
"""

from jobs import arrays, logs, queries, redaction, steps, validate
from jobs.admin import _cancel as cancel_steps
from jobs.admin import active_among_steps, supersede_steps
from jobs.config import UNSET, Unset, merged, setting
from jobs.config import settings as config_settings
from jobs.connection import LISTEN_URL_ENV, POOLER_ENV, POOLERS, UTC_ALIASES, Pooler, listen_url
from jobs.enqueue import JobColumns, enqueue_columns, existing_by_keys_steps
from jobs.enqueue import _columns_steps as enqueue_columns_steps
from jobs.listener import CHANNEL as JOBS_CHANNEL
from jobs.migrate import pending as pending_migrations
from jobs.service import default_name
from jobs.steps import Many, Steps, forms
from jobs.tracing import service_span
from jobs.validate import DEFAULT_MAX_ATTEMPTS
from jobs.worker import collect_less

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "JOBS_CHANNEL",
    "LISTEN_URL_ENV",
    "POOLERS",
    "POOLER_ENV",
    "UNSET",
    "UTC_ALIASES",
    "JobColumns",
    "Many",
    "Pooler",
    "Steps",
    "Unset",
    "active_among_steps",
    "arrays",
    "cancel_steps",
    "collect_less",
    "config_settings",
    "default_name",
    "enqueue_columns",
    "enqueue_columns_steps",
    "existing_by_keys_steps",
    "forms",
    "listen_url",
    "logs",
    "merged",
    "pending_migrations",
    "queries",
    "redaction",
    "service_span",
    "setting",
    "steps",
    "supersede_steps",
    "validate",
]
