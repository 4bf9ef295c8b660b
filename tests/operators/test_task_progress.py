"""The side channel a loop in a Spark task reports its rounds through
(``operators.task_progress``), without Spark: rounds arrive in order, a sender that cannot
reach the driver gives up quietly, and a closed listener passes nothing on."""

from __future__ import annotations

import time
from contextlib import closing

from fixflow.operators.engines.base import RoundInfo
from fixflow.operators.task_progress import SEND_EVERY_S, RoundListener, RoundSender


def _wait_for(predicate: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_rounds_reach_the_driver_in_order_throttled() -> None:
    seen: list[RoundInfo] = []
    with closing(RoundListener("localhost", seen.append)) as listener:
        sender = RoundSender(listener.address)
        sender(RoundInfo(1, 10, None))
        sender(RoundInfo(2, 9, None))  # within SEND_EVERY_S of the first: not sent
        time.sleep(SEND_EVERY_S + 0.05)
        sender(RoundInfo(3, 8, 0.5))
        _wait_for(lambda: len(seen) == 2)
        sender.close()
    assert [(r.round, r.pending, r.measure) for r in seen] == [(1, 10, None), (3, 8, 0.5)]


def test_a_sender_that_cannot_reach_the_driver_gives_up_quietly() -> None:
    listener = RoundListener("localhost", lambda info: None)
    address = listener.address
    listener.close()
    sender = RoundSender(address)
    sender(RoundInfo(1, 1, None))  # refused: no exception, nothing more tried
    assert sender.failed
    sender.last = float("-inf")
    sender(RoundInfo(2, 1, None))
    assert sender.link is None


def test_a_closed_listener_passes_no_round_on() -> None:
    seen: list[RoundInfo] = []
    listener = RoundListener("localhost", seen.append)
    sender = RoundSender(listener.address)
    sender(RoundInfo(1, 1, None))
    _wait_for(lambda: len(seen) == 1)
    listener.close()
    sender.last = float("-inf")
    sender(RoundInfo(2, 1, None))  # may still be written to the socket; never passed on
    time.sleep(0.1)
    sender.close()
    assert [r.round for r in seen] == [1]
