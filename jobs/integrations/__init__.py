"""Enqueue inside an ORM's transaction: small adapters, each importing its ORM only when used.

- :mod:`jobs.integrations.sqlalchemy`: a SQLAlchemy 2 ``Session``/``Connection`` or
  ``AsyncSession``/``AsyncConnection`` on the psycopg 3 dialect (``postgresql+psycopg://``).
- :mod:`jobs.integrations.django`: Django's connection (the psycopg 3 backend), joining
  ``transaction.atomic()``.

Each adapter hands Tockwork the psycopg connection that carries the ORM's current transaction,
so a job (or, through ``scheduler.create_schedule(connection(session), ...)``, a schedule)
commits exactly when the ORM's transaction commits, and a rollback leaves no job.
"""
