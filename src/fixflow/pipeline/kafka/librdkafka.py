"""What the two librdkafka clients (``fixflow publish``'s producer, the streaming source's
range reader) share: how librdkafka's own log lines reach Python logging."""

from __future__ import annotations

import logging
from typing import Any


class QuietLog(logging.LoggerAdapter):
    """librdkafka's own log lines at DEBUG: the errors that matter reach the caller as one
    line (a PublishError, the reader's wait for the broker), not as a burst of connection
    messages."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger.debug(msg, *args, **kwargs)
