"""Scenarios shared by the local and the object-store results-store tests (not a conftest)."""
from __future__ import annotations

import threading
import time


def second_writer_order(first, second, capsys) -> list[str]:
    """Hold ``first``'s writer lock, start a thread taking ``second``'s (same store), wait until
    it has said on stderr that it waits (no timing assertion), then release. Returns the order
    in which the two finished: ``["first done", "second"]`` when the second really waited."""
    order: list[str] = []
    with first.lock("run-1"):
        def other():
            with second.lock("run-2"):
                order.append("second")

        t = threading.Thread(target=other)
        t.start()
        # the second writer says on stderr that it waits: wait for that line (a generous bound
        # on a condition the code signals), never for a fixed time
        deadline, said = time.monotonic() + 600, ""
        while "waiting for it to finish" not in said:
            assert time.monotonic() < deadline, "the second writer never said that it waits"
            said += capsys.readouterr().err
            time.sleep(0.05)
        order.append("first done")
    t.join()
    return order
