"""Whether the Kafka broker answers, watched by `fixflow run`'s driver.

A broker that goes away must not kill a long-running stream: the reader plans no batch
while it is unreachable (``kafka.source``), and the driver uses ``BrokerWatch`` to say so
once, to report it on the health endpoint (``/ready`` answers 503 and ``fixflow_up`` is 0
while it waits), and to say once more when the broker is back. While the broker is away it
is probed with exponential back-off (0.5 s doubling up to ``[kafka] backoff_max_s``), so a
long outage costs a connection attempt every half minute, not a retry storm.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fixflow.pipeline.broker.embedded import reachable
from fixflow.pipeline.config import KafkaConfig
from fixflow.pipeline.errors import UserFacingError
from fixflow.pipeline.stream.metrics import Health

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
UP_PROBE_S = 2.0
"""While the broker answers, how often it is probed (``embedded.reachable``)."""
AVAILABLE_NOW_WAIT_S = 60.0
"""How long `fixflow run --available-now` waits for an absent broker when ``[kafka]
wait_for_broker_s`` is 0: a run meant to end must not wait forever."""


class BrokerUnavailable(UserFacingError):
    """The broker stayed unreachable for longer than ``[kafka] wait_for_broker_s``."""


class BrokerWatch:
    """The broker's reachability, probed when due; each change said once through ``say``."""

    def __init__(
        self,
        kafka: KafkaConfig,
        health: Health,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        *,
        available_now: bool = False,
    ) -> None:
        """``available_now``: the run processes what is there and exits, so it gives up
        after ``AVAILABLE_NOW_WAIT_S`` when ``wait_for_broker_s`` is 0 (forever)."""
        self.kafka = kafka
        self.servers = kafka.bootstrap_servers
        self.backoff_max_s = kafka.backoff_max_s
        self.give_up_after_s = kafka.wait_for_broker_s or (
            AVAILABLE_NOW_WAIT_S if available_now else 0.0
        )
        self._limit = (
            "[kafka] wait_for_broker_s"
            if kafka.wait_for_broker_s
            else "--available-now's limit; [kafka] wait_for_broker_s sets another"
        )
        self.health = health
        self.say = say
        self.clock = clock
        self.up = True
        self.down_since = 0.0
        self._backoff_s = FIRST_BACKOFF_S
        self._next_probe = 0.0
        self._state_before = health.state

    def check(self) -> bool:
        """Whether the broker answered at the last probe; probes again only when due (at
        once while it is up, after the back-off while it is down)."""
        now = self.clock()
        if now < self._next_probe:
            return self.up
        if reachable(self.kafka):
            self._came_back(now)
        else:
            self._went_away(now)
        return self.up

    def check_or_give_up(self) -> bool:
        """``check``, and raise ``BrokerUnavailable`` once the broker has been away for
        longer than the run waits for it (``wait_for_broker_s``; never when that is 0)."""
        if self.check():
            return True
        if self.give_up_after_s and self.clock() - self.down_since > self.give_up_after_s:
            raise BrokerUnavailable(
                f"no Kafka broker answers at {self.servers} after "
                f"{self.give_up_after_s:g} s ({self._limit}): start it "
                "(`fixflow broker start` for the embedded one) or fix bootstrap_servers"
            )
        return False

    def wait(self, stopping: threading.Event | None = None) -> bool:
        """Block until the broker answers (True) or ``stopping`` is set (False); raise
        BrokerUnavailable after ``wait_for_broker_s`` (when it is not 0)."""
        while not self.check_or_give_up():
            pause = max(0.05, min(self._next_probe - self.clock(), 1.0))
            if stopping is not None and stopping.wait(pause):
                return False
            if stopping is None:
                time.sleep(pause)
        return True

    def _went_away(self, now: float) -> None:
        if self.up:
            self.up, self.down_since = False, now
            self._backoff_s = FIRST_BACKOFF_S
            self._state_before = self.health.state
            self.health.set("waiting", f"Kafka broker {self.servers} unreachable")
            self.say(
                f"kafka: no broker answers at {self.servers}; waiting for it (retrying with "
                f"back-off up to {self.backoff_max_s:g} s; results stay as they are)"
            )
        else:
            self._backoff_s = min(self._backoff_s * 2, self.backoff_max_s)
        self._next_probe = now + self._backoff_s

    def _came_back(self, now: float) -> None:
        if not self.up:
            self.up = True
            self.health.set(self._state_before)
            self.say(
                f"kafka: broker at {self.servers} answers again after "
                f"{now - self.down_since:.0f} s; resuming"
            )
        self._next_probe = now + UP_PROBE_S
