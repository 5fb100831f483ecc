# myapp/handlers.py
import jobs

from myapp import provider


def send_push(job: jobs.Job) -> None:
    user = job.payload["user_id"]
    try:
        provider.send(user, idempotency_key=jobs.effects.effect_key(job, "push"))
    except provider.Timeout as exc:
        raise jobs.TransientError(str(exc), code="provider_timeout") from exc
    except provider.RateLimited as exc:
        raise jobs.RateLimited(exc.retry_after) from exc
    except provider.InvalidToken as exc:
        raise jobs.PermanentError(str(exc), code="bad_token") from exc


HANDLERS = {"send_push": send_push}
