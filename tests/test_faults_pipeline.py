"""Faults through the real pipeline, on a PRIVATE MariaDB instance this module starts on its
own port and data folder (the shared servers are never stopped):

* the server killed (``SIGKILL``) before the executions and started again once an execution
  has met the outage ends with the same verdicts as an undisturbed run (executions retried with backoff);
* a server that stays down past ``pipeline.unavailable_retry_s``: its rows are stored as
  ``unavailable`` (never as model failures), excluded from EX, and the next run scores them
  with the verdicts of an undisturbed run;
* an execution actor killed mid-run is restarted and its batch retried: same verdicts;
* a run joins no existing Ray cluster unless ``ray.address`` says so.

The moments of each fault are named points of the code (:mod:`polysql_ray.faults`), never
sleeps or timing, so a loaded machine cannot reorder them.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from polysql_ray.config import compose
from polysql_ray.pipeline.driver import ray_init_kwargs, run
from tests.fault_points import Points

pytestmark = pytest.mark.slow

PORT = 3317
COMPARE = ("verdict", "reason", "pred_status", "gold_status")


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class PrivateMariaDB:
    """``mariadb-install-db`` + ``mariadbd`` on ``port`` (default ``PORT``) in a temp folder,
    with ``args`` added to the server's command line; killed and started by its test only."""

    def __init__(self, root: Path, port: int = PORT, args: tuple[str, ...] = ()) -> None:
        self.root, self.data = root, root / "data"
        self.port, self.args = port, tuple(args)
        self.proc: subprocess.Popen | None = None

    def install(self) -> None:
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.data}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
             f"--socket={self.root / 'sock'}", "--user=root", "--bind-address=127.0.0.1",
             "--skip-log-bin", f"--pid-file={self.root / 'pid'}", *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 600  # a generous bound on a condition the server signals
        while _free(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("private MariaDB did not start")
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def private_mariadb(tmp_path_factory, port: int = PORT, args: tuple[str, ...] = ()):
    """Yield a started :class:`PrivateMariaDB` (skips when the binaries or the port are missing)."""
    if shutil.which("mariadb-install-db") is None or shutil.which("mariadbd") is None:
        pytest.skip("MariaDB binaries not installed (apt-get install mariadb-server)")
    if not _free(port):
        pytest.skip(f"port {port} is taken")
    server = PrivateMariaDB(tmp_path_factory.mktemp("mariadb"), port, args)
    server.install()
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    yield from private_mariadb(tmp_path_factory)


def _cfg(results_dir: Path, replicas: Path, *extra: str):
    return compose(["+sweep=quickstart", f"results_dir={results_dir}", "progress=false",
                    "sweep.models=[{name: flawed, generator: replay, predictions: "
                    "${repo_root:}/polysql_ray/quickstart/data/flawed.jsonl}]",
                    "dialects=[mysql]", f"engines.mysql.port={PORT}", f"replication.dir={replicas}",
                    "engines.mysql.actors=1", *extra])


def _verdicts(results_dir: Path) -> dict:
    from polysql_ray.store.parquet import ResultsStore

    rows = ResultsStore(results_dir).read().to_pylist()
    return {r["key"]: tuple(r[c] for c in COMPARE) for r in rows}


@pytest.fixture(scope="module")
def baseline(ray_session, mariadb, tmp_path_factory):
    out = tmp_path_factory.mktemp("baseline")
    replicas = tmp_path_factory.mktemp("replicas")
    stats, _ = run(*_cfg(out, replicas))
    assert stats.items_scored == 34 and not stats.unavailable and not stats.errors
    return replicas, _verdicts(out)


class Outage:
    """Orders a server outage on the named fault points of the MySQL execution actor
    (:mod:`polysql_ray.faults`), never on timing: the actor is held before its first statement
    (replication is done by then), the server is killed, the actor released; with ``restart``,
    the server is started again once an execution has met the dead server (point
    ``unavailable``). Errors of the ordering thread are raised by :meth:`join`."""

    def __init__(self, server: PrivateMariaDB, folder: Path, restart: bool) -> None:
        self.points, self.server, self.restart = Points(folder), server, restart
        self.error: BaseException | None = None
        self.points.hold("execute")
        self.thread = threading.Thread(target=self._go, daemon=True)
        self.thread.start()

    @property
    def override(self) -> str:
        return f"+engines.mysql._fault_points={self.points.folder}"

    def _go(self) -> None:
        try:
            self.points.wait("execute")
            self.server.kill()
            self.points.release("execute")
            if self.restart:
                self.points.wait("unavailable")
                self.server.start()
        except BaseException as exc:  # noqa: BLE001 — raised in the test by join()
            self.error = exc
        finally:
            self.points.release("execute")

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def test_server_killed_and_restarted_mid_run_gives_the_same_verdicts(baseline, mariadb, tmp_path):
    _, expected = baseline
    replicas = tmp_path / "replicas"  # a fresh copy: replication meets the live server
    outage = Outage(mariadb, tmp_path / "points", restart=True)
    # the outage lasts as long as the restart takes: a generous budget, so load cannot end it
    stats, table = run(*_cfg(tmp_path / "r", replicas, outage.override, "pipeline.unavailable_retry_s=900"))
    outage.join()
    assert outage.points.pids("unavailable"), "no execution met the outage"
    assert stats.exec_retries > 0, "the outage was met but not retried"
    assert not stats.unavailable and stats.items_scored == 34
    assert _verdicts(tmp_path / "r") == expected


def test_server_down_for_good_stores_unavailable_then_rerun_scores_it(baseline, mariadb, tmp_path):
    _, expected = baseline
    replicas = tmp_path / "replicas"
    out = tmp_path / "r"
    outage = Outage(mariadb, tmp_path / "points", restart=False)
    try:
        stats, table = run(*_cfg(out, replicas, outage.override, "pipeline.unavailable_retry_s=1"))
        outage.join()
        assert sum(stats.unavailable.values()) > 0 and set(stats.unavailable) == {"mysql"}
        scored = _verdicts(out)
        assert all(v[0] != "fail" or not v[1].endswith("unavailable") for v in scored.values())
        assert set(scored.items()) <= set(expected.items())  # nothing wrong recorded
        row = table.to_pylist()[0]
        assert row["unavailable"] == sum(stats.unavailable.values())
        counted = 34 - row["unavailable"]                   # excluded from EX (README legend)
        assert row["n"] == 34 and row["ex"] == round(100.0 * row["correct"] / counted, 2)
    finally:
        mariadb.start()
    stats2, _ = run(*_cfg(out, replicas))
    assert not stats2.unavailable and stats2.items_scored == sum(stats.unavailable.values())
    assert _verdicts(out) == expected
    assert not list((out / "unavailable").glob("*.parquet"))


def test_actor_killed_mid_run_is_restarted_and_its_batch_retried(baseline, mariadb, tmp_path):
    """Kill the MySQL execution actor's process while it is inside a batch (held at the fault
    point ``execute`` before its first statement); its restarted process runs the batch again."""
    replicas, expected = baseline
    points = Points(tmp_path / "points")
    points.hold("execute")
    killed: list[int] = []
    errors: list[BaseException] = []
    finished = threading.Event()

    def killer():
        try:
            pids = points.wait("execute", alive=lambda: not finished.is_set())
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
        except BaseException as exc:  # noqa: BLE001 — reported by the test
            errors.append(exc)
        finally:
            points.release("execute")

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        stats, _ = run(*_cfg(tmp_path / "r", replicas, "pipeline.exec_batch_size=4",
                             f"+engines.mysql._fault_points={points.folder}"))
    finally:
        finished.set()
        t.join()
    assert not errors, errors
    assert killed, f"no execution actor reached its first statement: {stats}"
    assert set(points.pids("execute")) - set(killed), "no restarted actor ran the batch again"
    assert stats.items_scored == 34 and not stats.unavailable
    assert _verdicts(tmp_path / "r") == expected


def test_unset_address_starts_a_new_local_cluster():
    assert ray_init_kwargs({"ray": {"address": None}})["address"] == "local"
    assert ray_init_kwargs({"ray": {}})["address"] == "local"
    assert ray_init_kwargs({"ray": {"address": "auto"}})["address"] == "auto"
    # raylet settings go to the run's own cluster only
    sc = {"num_workers_soft_limit": 0}
    assert ray_init_kwargs({"ray": {"system_config": sc}})["_system_config"] == sc
    assert "_system_config" not in ray_init_kwargs({"ray": {"address": "auto", "system_config": sc}})


def test_default_local_cluster_prestarts_no_worker():
    """The shipped raylet settings turn Ray's worker prestart off (an idle Python worker per CPU
    at the driver's start, more ahead of queued tasks); that the installed Ray accepts the keys
    is shown by every pipeline test here, whose cluster starts with them (an unknown key stops
    Ray's GCS from starting)."""
    sc = ray_init_kwargs(compose([])[0])["_system_config"]
    assert sc["prestart_worker_first_driver"] is False and sc["enable_worker_prestart"] is False
    assert sc["num_workers_soft_limit"] == 0


def test_statement_that_crashes_its_engine_is_isolated_to_its_own_item(ray_session, tmp_path):
    """The actor dies on one statement every time: Ray restarts it and retries the batch, the
    driver then splits the batch into single statements; only that one prediction gets a
    runtime failure, every other verdict equals an undisturbed run's."""
    import json

    from polysql_ray.store.parquet import ResultsStore

    preds = [json.loads(x) for x in
             (Path(__file__).parents[1] / "polysql_ray/quickstart/data/flawed.jsonl").read_text().splitlines() if x]
    crash_sql = "SELECT 4242 AS crash_me"
    preds[3]["pred_sql"] = crash_sql
    pfile = tmp_path / "preds.jsonl"
    pfile.write_text("".join(json.dumps(p) + "\n" for p in preds))
    common = ["+sweep=quickstart", "progress=false", "dialects=[duckdb]",
              f"sweep.models=[{{name: crashy, generator: replay, predictions: {pfile}}}]",
              f"replication.dir={tmp_path / 'replicas'}", "pipeline.exec_batch_size=8"]
    stats0, _ = run(*compose(common + [f"results_dir={tmp_path / 'clean'}"]))
    stats, _ = run(*compose(common + [f"results_dir={tmp_path / 'crash'}",
                                      f"+engines.duckdb._fault_exit_on='{crash_sql}'"]))
    assert stats.crashed == 1 and stats.items_scored == 34
    clean = {r["key"]: r for r in ResultsStore(tmp_path / "clean").read().to_pylist()}
    crash = {r["key"]: r for r in ResultsStore(tmp_path / "crash").read().to_pylist()}
    assert clean.keys() == crash.keys()
    differ = [k for k in clean if tuple(clean[k][c] for c in COMPARE) != tuple(crash[k][c] for c in COMPARE)]
    assert len(differ) == 1
    row = crash[differ[0]]
    assert row["pred_sql"] == crash_sql and row["pred_status"] == "runtime"
    assert "engine process died" in row["pred_error"]
