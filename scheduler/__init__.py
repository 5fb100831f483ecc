"""The replicated scheduler, user reminders and cron definitions; the CLI lives here too."""

from scheduler.errors import InvalidSchedule, ScheduleExists, ScheduleNotFound, SchedulerError
from scheduler.model import CatchUp, QuietAction, QuietHours, Schedule, TickResult
from scheduler.schedules import (
    create_schedule,
    create_schedules,
    delete,
    get_schedule,
    list_schedules,
    occurrence_idempotency_key,
    pause,
    resume,
    update_schedule,
)
from scheduler.spec import ScheduleSpec
from scheduler.tick import Scheduler
from timezones.errors import InvalidInput, TockworkError

__all__ = [
    "CatchUp",
    "InvalidInput",
    "InvalidSchedule",
    "QuietAction",
    "QuietHours",
    "Schedule",
    "ScheduleExists",
    "ScheduleNotFound",
    "ScheduleSpec",
    "Scheduler",
    "SchedulerError",
    "TickResult",
    "TockworkError",
    "create_schedule",
    "create_schedules",
    "delete",
    "get_schedule",
    "list_schedules",
    "occurrence_idempotency_key",
    "pause",
    "resume",
    "update_schedule",
]
