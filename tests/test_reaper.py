"""The reaper of a run's local Ray cluster (:data:`polysql_ray.pipeline.cluster.REAPER`): after
``kill -9`` of the driver, every descendant it noted is killed, those that existed when it
started and those started later, children and grandchildren, even while the driver is still
an unreaped zombie.

No Ray here: the "driver" is a Python process with a small tree of sleeping processes. Each of
them holds the write end of one pipe and writes its pid there on start; the test knows they are
all gone when the pipe reads end-of-file. The reaper writes a line after each /proc listing.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from polysql_ray.pipeline import cluster

SLEEPER = "import os, sys, time; os.write(int(sys.argv[1]), b'%d\\n' % os.getpid()); {spawn}time.sleep(600)"
#: A child that starts a grandchild, then (on a line on stdin) one more child.
DRIVER = r"""
import subprocess, sys
fd = int(sys.argv[1])
leaf = {leaf!r}
mid = {mid!r}
subprocess.Popen([sys.executable, "-c", mid, str(fd)], pass_fds=(fd,))
sys.stdin.readline()
subprocess.Popen([sys.executable, "-c", leaf, str(fd)], pass_fds=(fd,))
sys.stdin.readline()
"""
GUARD_S = 120  # only a bound on a failure: nothing here waits for time to pass


def _pids(r: int, n: int) -> list[int]:
    """Read ``n`` pid lines from the pipe (the processes that started)."""
    buf = b""
    while buf.count(b"\n") < n:
        ready, _, _ = select.select([r], [], [], GUARD_S)
        assert ready, f"only {buf!r} of {n} processes started"
        chunk = os.read(r, 4096)
        assert chunk, "the pipe closed before every process started"
        buf += chunk
    return [int(x) for x in buf.split()]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_reaper_kills_every_noted_descendant_of_a_killed_driver():
    leaf = SLEEPER.format(spawn="")
    mid = SLEEPER.format(spawn=f"import subprocess; subprocess.Popen([sys.executable, '-c', {leaf!r}, sys.argv[1]], "
                               "pass_fds=(int(sys.argv[1]),)); ")
    r, w = os.pipe()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(leaf=leaf, mid=mid), str(w)], pass_fds=(w,),
                              stdin=subprocess.PIPE)
    os.close(w)
    tree: list[int] = []
    reaper = None
    try:
        tree += _pids(r, 2)  # the child and its grandchild
        reaper = cluster._start_reaper(driver.pid, stdout=subprocess.PIPE)
        assert reaper.stdout.readline().strip() == b"2"  # both noted at its first listing
        driver.stdin.write(b"\n")
        driver.stdin.flush()
        tree += _pids(r, 1)  # a child started after the reaper's first listing
        reaper.stdout.readline()  # (a listing that may have begun before it)
        assert reaper.stdout.readline().strip() == b"3"
        os.kill(driver.pid, signal.SIGKILL)  # not reaped yet: a zombie is a dead driver too
        while True:
            ready, _, _ = select.select([r], [], [], GUARD_S)
            assert ready, f"descendants still alive after the driver's death: {tree}"
            if not os.read(r, 4096):
                break  # every process holding the pipe is gone
        assert reaper.wait(timeout=GUARD_S) == 0
    finally:
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        driver.kill()
        driver.wait()
        if reaper is not None:
            reaper.kill()
            reaper.wait()
        os.close(r)
