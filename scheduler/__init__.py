"""The replicated scheduler, user reminders and cron definitions; the CLI lives here too."""

from scheduler.errors import InvalidSchedule, ScheduleExists, ScheduleNotFound, SchedulerError
from scheduler.model import CatchUp, Overlap, QuietAction, QuietHours, Schedule, TickResult
from scheduler.occurrence_job import occurrence_idempotency_key
from scheduler.runs import (
    Backfill,
    OccurrenceRun,
    backfill,
    backfill_async,
    trigger,
    trigger_async,
)
from scheduler.schedules import (
    create_schedule,
    create_schedule_async,
    create_schedules,
    create_schedules_async,
    delete,
    delete_async,
    get_schedule,
    get_schedule_async,
    list_schedules,
    list_schedules_async,
    pause,
    pause_async,
    resume,
    resume_async,
    update_schedule,
    update_schedule_async,
)
from scheduler.spec import ScheduleSpec
from scheduler.tick import Scheduler, SchedulerConfig
from timezones.errors import InvalidInput, TockworkError

__all__ = [
    "Backfill",
    "CatchUp",
    "InvalidInput",
    "InvalidSchedule",
    "OccurrenceRun",
    "Overlap",
    "QuietAction",
    "QuietHours",
    "Schedule",
    "ScheduleExists",
    "ScheduleNotFound",
    "ScheduleSpec",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerError",
    "TickResult",
    "TockworkError",
    "backfill",
    "backfill_async",
    "create_schedule",
    "create_schedule_async",
    "create_schedules",
    "create_schedules_async",
    "delete",
    "delete_async",
    "get_schedule",
    "get_schedule_async",
    "list_schedules",
    "list_schedules_async",
    "occurrence_idempotency_key",
    "pause",
    "pause_async",
    "resume",
    "resume_async",
    "trigger",
    "trigger_async",
    "update_schedule",
    "update_schedule_async",
]
