"""Push delivery: the channel seam, the message model, and the channels (FCM, APNs, simulated).

``scheduler.push.channel`` is the seam; ``scheduler.push.message`` what crosses it.
"""

from scheduler.push.channel import PushChannel
from scheduler.push.message import PushMessage, PushResult, PushStatus, redact_token

__all__ = ["PushChannel", "PushMessage", "PushResult", "PushStatus", "redact_token"]
