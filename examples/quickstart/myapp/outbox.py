# myapp/outbox.py
from jobs import JobSpec
from jobs.outbox import Event, Projection, Projections

projections = Projections()


@projections.on("order.placed", name="order-confirmation")
def confirmation(event: Event) -> list[JobSpec]:
    if event.schema_version != 1:
        raise ValueError(f"unknown schema_version {event.schema_version}")
    return [
        JobSpec("send_confirmation", {"order": event.aggregate_id}, queue="notifications"),
        JobSpec("update_crm", {"order": event.aggregate_id}, queue="webhooks"),
    ]


def audit(event: Event) -> list[JobSpec]:
    return [JobSpec("audit", {"event": str(event.id), "type": event.event_type}, queue="audit")]


# or without the decorator:
projections.add(Projection("audit", frozenset({"order.placed", "order.cancelled"}), audit))
