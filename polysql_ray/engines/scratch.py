"""Scratch folders owned by a process: removed when it exits, swept when it was killed.

An embedded engine needs a private folder (DuckDB's ``temp_directory`` for spilling, chdb's
one data path per process). A Ray actor killed (``ray.kill``, ``ray.shutdown``, OOM, SIGKILL)
never runs its exit hooks, so such a folder would stay forever; each one is therefore named
after its owner, ``polysql-<kind>-<pid>-<random>``, and every new one first removes the folders
of the same kind whose owner process no longer lives (the next start of an engine on the same
node sweeps what a killed one left).

Assumes the parent folder is not shared with processes of another PID namespace (a container
mounting the host's ``/tmp``): there a live owner looks dead. A reused pid keeps its dead
predecessor's folder until the new process ends too.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

_OWNED: set[str] = set()
_LOCK = threading.Lock()


def _remove_owned() -> None:
    with _LOCK:
        for path in list(_OWNED):
            shutil.rmtree(path, ignore_errors=True)
        _OWNED.clear()


atexit.register(_remove_owned)


def owned_temp_dir(kind: str, root: str | os.PathLike | None = None) -> str:
    """Create ``<root>/polysql-<kind>-<pid>-<random>`` (default root: the system temp folder,
    ``TMPDIR``), removed at this process's exit or by :func:`release`; first sweeps the
    orphans of ``kind`` (:func:`sweep_orphans`). Returns the path."""
    sweep_orphans(kind, root)
    path = tempfile.mkdtemp(prefix=f"polysql-{kind}-{os.getpid()}-", dir=root)
    with _LOCK:
        _OWNED.add(path)
    return path


def release(path: str) -> None:
    """Remove a folder made by :func:`owned_temp_dir` now (its owner closed it)."""
    with _LOCK:
        _OWNED.discard(path)
    shutil.rmtree(path, ignore_errors=True)


def sweep_orphans(kind: str, root: str | os.PathLike | None = None) -> list[str]:
    """Delete the ``polysql-<kind>-<pid>-*`` folders under ``root`` whose process is gone.
    Folders of live processes, of other users' processes and names without a pid are kept.
    Returns the paths removed."""
    removed = []
    for p in Path(root or tempfile.gettempdir()).glob(f"polysql-{kind}-*-*"):
        try:
            pid = int(p.name[len(f"polysql-{kind}-"):].split("-")[0])
        except ValueError:
            continue  # not a pid
        if not process_alive(pid):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
    return removed


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` lives (another user's counts as alive; a zombie, dead but not
    yet reaped by its parent, as gone: it runs nothing and will never clean up)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): os.kill said it exists
