"""Fault table: the four-dialect Spider sweep under faults, compared with an undisturbed run.

    flock /tmp/polysql-servers.lock python benchmarks/fault_table.py --out /tmp/faults [--only NAME ...]

(the script takes that lock itself around every scenario when run without it). Scenarios:

* ``baseline``      undisturbed run (the reference);
* ``driver_kill9``  ``kill -9`` of the driver once ~40% of the rows are stored, then a rerun;
                    also counts the run's Ray processes still alive 10 s after the kill;
* ``actor_kill``    ``kill -9`` of an execution actor's process, twice, during the run;
* ``servers_down``  PostgreSQL and MariaDB stopped for 30 s mid-run, then started again;
* ``concurrent``    two identical runs started together into one results_dir;
* ``readonly``      a rerun into a finished results_dir mounted read-only;
* ``readonly_mid``  the results_dir remounted read-only once ~40% of the rows are stored (the
                    run must end with one line, exit non-zero), then writable again and a rerun;
* ``full``          the results_dir on a small tmpfs that fills mid-run (``--fault-inject``: an
                    ENOSPC injected at the store's write point instead, where no tmpfs can be
                    mounted), then space freed and a rerun;
* ``truncated``     a part file of a finished store cut in half, then a rerun;
* ``damaged``       16 bytes zeroed in the middle of a part file of a finished store (same
                    size: only its checksum tells), then a rerun.

``--sweep``/``--dialects`` pick a smaller grid (``--sweep quickstart --dialects sqlite,duckdb``
needs no server; the mounts need root).

For each: rows planned, rows stored (raw ``read_parquet`` over ``scores/``, i.e. what any
reader sees), duplicates (rows minus distinct keys), rows differing from the baseline
(verdict, reason, pred_status, gold_status), rows in ``unavailable/``, exit statuses.
Prints a Markdown table. Needs the PostgreSQL and MariaDB servers of the README.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from polysql_ray.errors import SERVER_START

REPO = Path(__file__).resolve().parents[1]
LOCK = "/tmp/polysql-servers.lock"
COMPARE = ("verdict", "reason", "pred_status", "gold_status")
PG_VERSION = sorted(os.listdir("/etc/postgresql"))[0] if os.path.isdir("/etc/postgresql") else "15"
SERVER_CMDS = {
    "stop": [["pg_ctlcluster", "--skip-systemctl-redirect", PG_VERSION, "main", "stop", "-m", "fast"],
             ["mysqladmin", "--protocol=tcp", "-h", "127.0.0.1", "-u", "root", "shutdown"]],
    "start": [["pg_ctlcluster", "--skip-systemctl-redirect", PG_VERSION, "main", "start"],
              shlex.split(SERVER_START["mysql"])],
}


GRID = {"sweep": "spider_published", "dialects": "sqlite,duckdb,postgres,mysql"}


def sweep_cmd(results_dir: Path, replicas: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "polysql_ray", f"+sweep={GRID['sweep']}",
            f"dialects=[{GRID['dialects']}]", f"results_dir={results_dir}",
            f"replication.dir={replicas}", "progress=false", *extra]


def start(results_dir: Path, replicas: Path, extra: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen(sweep_cmd(results_dir, replicas, extra), cwd=REPO, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def error_lines(log: Path) -> list[str]:
    """The ``polysql_ray: error:`` lines and traceback headers a run printed."""
    return [ln for ln in log.read_text(errors="replace").splitlines()
            if ln.startswith("polysql_ray: error:") or ln.startswith("Traceback")]


def stored(results_dir: Path, sub: str = "scores"):
    """(rows, distinct keys) over the raw part files (what any reader of the folder sees)."""
    files = sorted((results_dir / sub).rglob("*.parquet")) if (results_dir / sub).is_dir() else []
    if not files:
        return 0, 0
    lst = "[" + ",".join(f"'{f}'" for f in files) + "]"
    with contextlib.suppress(duckdb.Error):
        return duckdb.sql(f"SELECT count(*), count(DISTINCT key) FROM read_parquet({lst})").fetchall()[0]
    return -1, -1


def differing(results_dir: Path, baseline: Path) -> tuple[int, int]:
    """(keys stored on both sides whose row differs, baseline keys not stored here)."""
    def lst(d):
        return "[" + ",".join(f"'{f}'" for f in sorted((d / "scores").rglob("*.parquet"))) + "]"
    cond = " OR ".join(f"a.{c} IS DISTINCT FROM b.{c}" for c in COMPARE)
    return duckdb.sql(
        f"SELECT count(*) FILTER (WHERE a.key IS NOT NULL AND b.key IS NOT NULL AND ({cond})), "
        f"count(*) FILTER (WHERE a.key IS NULL) "
        f"FROM (SELECT DISTINCT ON (key) * FROM read_parquet({lst(results_dir)})) a "
        f"FULL JOIN (SELECT DISTINCT ON (key) * FROM read_parquet({lst(baseline)})) b USING (key)"
    ).fetchall()[0]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def wait_rows(results_dir: Path, n: int, proc: subprocess.Popen, timeout: float = 900) -> int:
    t0 = time.time()
    while time.time() - t0 < timeout and proc.poll() is None:
        rows, _ = stored(results_dir)
        if rows >= n:
            return rows
        time.sleep(1)
    return stored(results_dir)[0]


def servers(action: str) -> None:
    for cmd in SERVER_CMDS[action]:
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if action == "start":
        for _ in range(60):
            ok_pg = subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0
            ok_my = subprocess.run(["mysqladmin", "--protocol=tcp", "-h", "127.0.0.1", "-u", "root", "ping"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
            if ok_pg and ok_my:
                return
            time.sleep(1)


@contextlib.contextmanager
def server_lock():
    if os.environ.get("POLYSQL_HOLDS_SERVER_LOCK") == "1":
        yield
        return
    with open(LOCK, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("polysql_ray:")]
    return (errs or lines or [""])[-1][:300]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/polysql_faults")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every run")
    ap.add_argument("--sweep", default=GRID["sweep"])
    ap.add_argument("--dialects", default=GRID["dialects"])
    ap.add_argument("--fault-inject", action="store_true",
                    help="full disk by an injected ENOSPC instead of a small tmpfs")
    ap.add_argument("--full-free-kb", default=64, type=int, help="free space left on the tmpfs (KiB)")
    args = ap.parse_args()
    GRID.update(sweep=args.sweep, dialects=args.dialects)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    replicas = out / "replicas"
    base = out / "baseline"
    extra = args.extra
    results = []
    want = set(args.only or ["baseline", "driver_kill9", "actor_kill", "servers_down", "concurrent",
                             "readonly", "readonly_mid", "full", "truncated", "damaged"])

    def record(name, d, codes, note=""):
        rows, keys = stored(d)
        unav, _ = stored(d, "unavailable")
        diff, missing = differing(d, base) if (base / "scores").is_dir() and name != "baseline" else (0, 0)
        results.append((name, rows, keys, rows - keys, diff, missing, unav, codes, note))
        print(f"{name}: rows {rows} keys {keys} dup {rows - keys} differing {diff} missing {missing} "
              f"unavailable {unav} exit {codes} {note}", flush=True)

    def fresh(name):
        d = out / name
        shutil.rmtree(d, ignore_errors=True)
        return d

    if "baseline" in want:
        with server_lock():
            d = fresh("baseline")
            t0 = time.time()
            p = start(d, replicas, extra, out / "baseline.log")
            code = p.wait()
            record("baseline", d, [code], f"{time.time() - t0:.0f}s")
    planned = stored(base)[1]
    print(f"rows planned (baseline keys): {planned}", flush=True)

    if "driver_kill9" in want:
        with server_lock():
            d = fresh("driver_kill9")
            p = start(d, replicas, extra, out / "driver_kill9.log")
            at = wait_rows(d, int(planned * 0.4), p)
            procs = descendants(p.pid)
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            time.sleep(10)
            alive = [q for q in procs if Path(f"/proc/{q}").exists() and cmdline(q)]
            after_kill = stored(d)[0]
            for q in alive:  # our own orphans only, by pid
                with contextlib.suppress(OSError):
                    os.kill(q, signal.SIGKILL)
            p2 = start(d, replicas, extra, out / "driver_kill9.rerun.log")
            code2 = p2.wait()
            record("driver_kill9", d, [-9, code2],
                   f"stored at kill {after_kill} (seen {at} just before); orphan processes 10s after: {len(alive)}")

    if "actor_kill" in want:
        with server_lock():
            d = fresh("actor_kill")
            p = start(d, replicas, extra, out / "actor_kill.log")
            killed = []
            for frac in (0.2, 0.5):
                wait_rows(d, int(planned * frac), p)
                actors = [q for q in descendants(p.pid) if "ExecutionActor" in cmdline(q)]
                if actors:
                    victim = sorted(actors)[len(killed) % len(actors)]
                    with contextlib.suppress(OSError):
                        os.kill(victim, signal.SIGKILL)
                        killed.append(victim)
            code = p.wait()
            record("actor_kill", d, [code], f"actors killed: {len(killed)}")

    if "servers_down" in want:
        with server_lock():
            d = fresh("servers_down")
            p = start(d, replicas, extra, out / "servers_down.log")
            wait_rows(d, int(planned * 0.25), p)
            try:
                servers("stop")
                t_stop = time.time()
                time.sleep(30)
            finally:
                servers("start")
            down = time.time() - t_stop
            code = p.wait()
            record("servers_down", d, [code], f"servers down {down:.0f}s")

    if "concurrent" in want:
        with server_lock():
            d = fresh("concurrent")
            p1 = start(d, replicas, extra, out / "concurrent.1.log")
            p2 = start(d, replicas, extra, out / "concurrent.2.log")
            record("concurrent", d, [p1.wait(), p2.wait()])

    if "readonly" in want:
        d = fresh("readonly")
        shutil.copytree(base, d, ignore=shutil.ignore_patterns("replicas"))
        subprocess.run(["mount", "--bind", str(d), str(d)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True)
            with server_lock():
                p = start(d, replicas, extra, out / "readonly.log")
                code = p.wait()
        finally:
            subprocess.run(["umount", str(d)], check=False)
        record("readonly", d, [code], last_line(out / "readonly.log"))

    if "truncated" in want:
        with server_lock():
            d = fresh("truncated")
            shutil.copytree(base, d, ignore=shutil.ignore_patterns("replicas"))
            victim = sorted((d / "scores").rglob("*.parquet"))[0]
            cut = victim.stat().st_size // 2
            with open(victim, "r+b") as fh:
                fh.truncate(cut)
            p = start(d, replicas, extra, out / "truncated.log")
            code = p.wait()
            record("truncated", d, [code], last_line(out / "truncated.log"))

    if "readonly_mid" in want:
        d = fresh("readonly_mid")
        d.mkdir(parents=True)
        mounted = 0
        try:
            with server_lock():
                p = start(d, replicas, extra, out / "readonly_mid.log")
                at = wait_rows(d, int(planned * 0.4), p)
                # a read-only bind mount stacked over the folder: every open from now on is
                # read-only (a remount of the folder's own mount is refused while the run holds
                # its lock file open for writing)
                subprocess.run(["mount", "--bind", str(d), str(d)], check=True)
                mounted += 1
                subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True)
                code = p.wait()
        finally:
            for _ in range(mounted):
                subprocess.run(["umount", str(d)], check=False)
        stored_then = stored(d)[0]
        errs = error_lines(out / "readonly_mid.log")
        with server_lock():
            code2 = start(d, replicas, extra, out / "readonly_mid.rerun.log").wait()
        record("readonly_mid", d, [code, code2],
               f"read-only at {at} rows, {stored_then} stored when it ended; error/traceback lines "
               f"{len(errs)}: {errs[0][:200] if errs else '-'}")

    if "full" in want:
        d = fresh("full")
        d.mkdir(parents=True)
        env = None
        mounted = False
        if args.fault_inject:
            env = {"POLYSQL_FAULT": "store.write:ENOSPC:5"}  # probe, manifest, config, 2 parts, then full
        else:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)], check=True)
            mounted = True
        try:
            if mounted:  # leave room for the run's first parts only
                filler = d / "filler"
                subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k",
                                f"count={4 * 256 - int(args.full_free_kb) // 4}"],
                               check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with server_lock():
                code = start(d, replicas, extra, out / "full.log", env).wait()
            stored_then = stored(d)[0]
            errs = error_lines(out / "full.log")
            if mounted:
                (d / "filler").unlink()
            with server_lock():
                code2 = start(d, replicas, extra, out / "full.rerun.log").wait()
            record("full", d, [code, code2], f"{stored_then} stored when it ended; error/traceback lines "
                   f"{len(errs)}: {errs[0][:200] if errs else '-'}")
        finally:
            if mounted:
                keep = out / "full.kept"
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(d, keep)
                subprocess.run(["umount", str(d)], check=False)
                shutil.rmtree(d, ignore_errors=True)
                shutil.move(str(keep), str(d))

    if "damaged" in want:
        with server_lock():
            d = fresh("damaged")
            shutil.copytree(base, d, ignore=shutil.ignore_patterns("replicas"))
            victim = max((d / "scores").rglob("*.parquet"), key=lambda f: f.stat().st_size)
            size = victim.stat().st_size
            with open(victim, "r+b") as fh:
                fh.seek(size // 2)
                fh.write(b"\0" * 16)
            p = start(d, replicas, extra, out / "damaged.log")
            code = p.wait()
            record("damaged", d, [code], last_line(out / "damaged.log"))

    print("\n| fault | rows planned | rows stored | duplicates | differing from undisturbed | "
          "not stored | unavailable left | exit | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rows, keys, dup, diff, missing, unav, codes, note in results:
        print(f"| {name} | {planned} | {rows} | {dup} | {diff} | {missing} | {unav} | {codes} | {note} |")


if __name__ == "__main__":
    main()
