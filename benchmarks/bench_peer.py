"""The 21-set SQLite sweep against the peer's per-set loop (issue 13 item 6a).

Measures whole process trees from outside: each contender runs as a child of this script, which
makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``) so every descendant, daemonised Ray
processes included, stays in its tree and is reaped here. Printed per contender:

* wall (s): from start until the contender's top process exits;
* CPU (s): user + system of the whole tree. Exact where a cgroup-v1 ``cpuacct`` hierarchy is
  writable (the contender runs in a cgroup of its own, ``cpuacct.usage``); else the sum over
  every process seen of its last sampled ``utime + stime`` (misses what a process spends after
  its last sample). ``wait4`` rusage is no use here: Ray's raylet ignores SIGCHLD, so its
  workers' CPU never reaches a parent;
* tree peak RSS (MiB): ``/proc`` sampled every ``--sample-s`` s, the sum of RSS over all
  descendants at each sample, max over time; beside it the same for PSS (shared pages split
  among their users, from ``smaps_rollup``), the largest single process (peak RSS and its name)
  and the most processes alive at once;
* EX (correct / scored): as a check that both score the same work.

The sweep: Spider dev on the 19 databases of the shared mirror (972 questions; ``wta_1`` is
missing and the peer cannot run without it), dialect ``sqlite``, 21 prediction sets. The five
distinct sets (the four in ``predictions/spider_dev`` and the gold SQL) are cycled under new
names: set ``i`` is ``BASE[i % 5]`` named ``<base>-r<i // 5>`` (dail_sql_gpt4 five times, the
others four), 21 x 972 = 20,412 items.

Contenders (each optional, in this order, one after the other):

* ``--peer DIR``: test-suite-sql-eval's ``evaluation.py --etype exec``, one process per set (its
  per-set loop), under ``--peer-python`` (a Python with nltk, sqlparse and tqdm). It receives
  the same 972 questions: gold as ``SQL<TAB>db_id`` lines, predictions one per line (CRLF and
  trailing whitespace stripped, as its reader does). nltk's ``word_tokenize`` is called with
  ``preserve_line=True`` (a shim before its import) so no punkt model has to be downloaded; for
  SQL text that only skips a sentence splitter.
* ``--baseline REF``: this project at git ``REF`` (``git archive`` into a temp folder, run with
  ``PYTHONPATH`` pointing there), e.g. the previous release;
* ours: this checkout, ``python -m polysql_ray`` with the sweep as command-line overrides;
* ``--variant 'k=v k2=v2'`` (repeatable): this checkout again with more overrides.

Ours runs from an empty results folder each time (no replica is needed: sqlite is the source).
The verdicts of every (model, question) of each later run of ours are compared with the first.

    python benchmarks/bench_peer.py [--peer /tmp/test-suite-sql-eval --peer-python PY]
        [--baseline REF] [--variant OVERRIDES ...] [--sets 21] [--repeats 1] [-- overrides for all of ours]

Nothing of the peer is part of this project: check it out anywhere outside the repository.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE_SETS = ("dail_sql_gpt4", "c3sql_gpt35", "resdsql_3b", "codes_15b_sft", "gold")
PAGE = os.sysconf("SC_PAGE_SIZE")
PR_SET_CHILD_SUBREAPER = 36

PEER_SHIM = """
import functools, runpy, sys
import nltk
nltk.word_tokenize = functools.partial(nltk.word_tokenize, preserve_line=True)
peer = sys.argv.pop(1)
sys.path.insert(0, peer)
sys.argv[0] = peer + "/evaluation.py"
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# ----------------------------------------------------------------------------- the tree

def _proc_stat(pid: str) -> tuple[int, str, int, str, int] | None:
    """(ppid, start time, RSS bytes, comm, utime + stime in ticks) of a live process, None
    when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    f = raw[raw.rindex(")") + 2:].split()
    return int(f[1]), f[19], int(f[21]) * PAGE, comm, int(f[11]) + int(f[12])


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _name(pid: int, comm: str) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    words = [a.decode(errors="replace") for a in argv if a]
    if not words:
        return comm
    if words[0].startswith("ray::"):
        return words[0].split()[0]
    if os.path.basename(words[0]).startswith("python"):
        if "-m" in words[:-1]:
            return f"python -m {words[words.index('-m') + 1]}"
        if "-c" in words:
            return "python -c"
        rest = [w for w in words[1:] if not w.startswith("-")][:1]
        return f"python {os.path.basename(rest[0]) if rest else ''}"
    return os.path.basename(words[0])


class TreeSampler(threading.Thread):
    """Samples every descendant of this process (not this process itself) from /proc."""

    def __init__(self, every_s: float):
        super().__init__(daemon=True)
        self.every_s, self.stop_flag = every_s, threading.Event()
        self.peak_rss = self.peak_pss = self.peak_procs = 0
        self.largest = (0, "")        # (peak RSS of one process, its name)
        self.samples = 0
        self.at_peak: list[tuple[int, str]] = []  # (RSS, name) of each process at the peak sample
        self.cpu_ticks: dict[tuple[int, str], int] = {}  # (pid, start time) -> last utime + stime
        self.names: dict[tuple[int, str], str] = {}      # (pid, start time) -> process name

    def run(self) -> None:
        me = os.getpid()
        while not self.stop_flag.is_set():
            kids: dict[int, list[tuple[int, int, str]]] = {}
            for d in os.listdir("/proc"):
                if d.isdigit():
                    st = _proc_stat(d)
                    if st:
                        kids.setdefault(st[0], []).append((int(d), st[2], st[3], st[1], st[4]))
            tree, todo = [], [me]
            while todo:
                for pid, rss, comm, start, ticks in kids.get(todo.pop(), []):
                    tree.append((pid, rss, comm))
                    self.cpu_ticks[(pid, start)] = ticks
                    name = _name(pid, comm)  # the latest, but a Ray worker keeps the task name it had
                    if name != "ray::IDLE" or (pid, start) not in self.names:
                        self.names[(pid, start)] = name
                    todo.append(pid)
            if tree:
                self.samples += 1
                total = sum(r for _, r, _ in tree)
                if total > self.peak_rss:
                    self.at_peak = sorted(((rss, _name(pid, comm)) for pid, rss, comm in tree), reverse=True)
                self.peak_rss = max(self.peak_rss, total)
                self.peak_pss = max(self.peak_pss, sum(_pss(p) for p, _, _ in tree))
                self.peak_procs = max(self.peak_procs, len(tree))
                pid, rss, comm = max(tree, key=lambda t: t[1])
                if rss > self.largest[0]:
                    self.largest = (rss, _name(pid, comm))
            self.stop_flag.wait(self.every_s)


def measure(argv: list[str], env: dict, cwd: str, log: Path, sample_s: float, linger_s: float = 30.0) -> dict:
    """Run ``argv`` and its whole process tree; figures as documented in the module."""
    group = _cpu_cgroup()
    sampler = TreeSampler(sample_s)
    sampler.start()
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        top = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                               preexec_fn=(lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
                               if group else None)
    wall, code, lingering = None, None, 0
    while True:  # reap the top process and every orphan of its tree (we are their subreaper)
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if wall is not None and time.perf_counter() - t0 - wall > linger_s:
                lingering = _kill_descendants()
                linger_s = float("inf")
            time.sleep(0.02)
            continue
        if pid == top.pid:
            wall, code = time.perf_counter() - t0, os.waitstatus_to_exitcode(status)
            top.returncode = code  # reaped here, not by Popen
    sampler.stop_flag.set()
    sampler.join()
    sampled = sum(sampler.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")
    by_name: dict[str, float] = {}
    for key, ticks in sampler.cpu_ticks.items():
        name = sampler.names.get(key, "?")
        by_name[name] = by_name.get(name, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
    if group:
        cpu, how = int((group / "cpuacct.usage").read_text()) / 1e9, "cgroup"
        group.rmdir()
    else:
        cpu, how = sampled, "sampled"
    return {"wall_s": wall, "tree_s": time.perf_counter() - t0, "cpu_s": cpu, "cpu_how": how,
            "cpu_sampled_s": sampled, "exit": code, "peak_rss": sampler.peak_rss, "peak_pss": sampler.peak_pss,
            "largest": sampler.largest, "procs": sampler.peak_procs,
            "cpu_by_name": sorted(by_name.items(), key=lambda kv: -kv[1]), "at_peak": sampler.at_peak, "samples": sampler.samples,
            "lingering": lingering}


def cpu_by_name(r: dict, top: int = 10) -> str:
    """The tree's CPU seconds (sampled from /proc) summed per process name, largest first."""
    return ", ".join(f"{name} {s:.1f}" for name, s in r.get("cpu_by_name", [])[:top])


def _cpu_cgroup() -> Path | None:
    """A fresh cgroup-v1 cpuacct group for one contender, or None where none can be made."""
    root = Path("/sys/fs/cgroup/cpuacct")
    here = root / f"polysql-bench-{os.getpid()}-{time.monotonic_ns()}"
    try:
        here.mkdir()
        return here
    except OSError:
        return None


def _kill_descendants() -> int:
    """SIGKILL what is still in the tree long after its top process ended (counted, reported)."""
    me, n = os.getpid(), 0
    for d in os.listdir("/proc"):
        st = _proc_stat(d) if d.isdigit() else None
        if st and st[0] == me:
            try:
                os.kill(int(d), 9)
                n += 1
            except OSError:
                pass
    return n


# ----------------------------------------------------------------------------- the sweep

def sets(n: int) -> list[tuple[str, str]]:
    """(name, base set) of the ``n`` prediction sets: the five bases cycled."""
    return [(f"{BASE_SETS[i % len(BASE_SETS)]}-r{i // len(BASE_SETS)}", BASE_SETS[i % len(BASE_SETS)])
            for i in range(n)]


def spider_subset(shared: Path) -> tuple[list[int], list[str]]:
    """Positions in dev.json of the questions whose database the mirror has, and those db ids."""
    dev = json.loads((shared / "data/spider/dev.json").read_text())
    have = sorted(p.name for p in (shared / "data/spider/database").iterdir()
                  if (p / f"{p.name}.sqlite").exists())
    return [i for i, ex in enumerate(dev) if ex["db_id"] in have], have


def peer_inputs(shared: Path, keep: list[int], work: Path) -> dict[str, Path]:
    """Gold and one prediction file per base set, restricted to ``keep`` (the peer's formats)."""
    gold = [line.rstrip("\r\n") for line in (shared / "data/spider/dev_gold.sql").read_text().splitlines()]
    out = {"__gold__": work / "gold.txt"}
    out["__gold__"].write_text("".join(gold[i] + "\n" for i in keep))
    for base in BASE_SETS:
        if base == "gold":
            lines = [g.split("\t")[0] for g in gold]
        else:
            lines = (shared / f"data/predictions/spider_dev/{base}.sql").read_bytes().decode().splitlines()
        out[base] = work / f"pred-{base}.txt"
        out[base].write_text("".join(lines[i].strip() + "\n" for i in keep))
    return out


def our_argv(python: str, shared: Path, db_ids: list[str], names: list[tuple[str, str]], results: Path,
             extra: list[str]) -> list[str]:
    models = ",".join(
        f"{{name:{name},generator:gold}}" if base == "gold" else
        f"{{name:{name},generator:replay,predictions:'{shared}/data/predictions/spider_dev/{base}.sql'}}"
        for name, base in names)
    return [python, "-m", "polysql_ray", "dataset=spider", f"dataset.db_ids=[{','.join(db_ids)}]",
            "dialects=[sqlite]", f"results_dir={results}", f"replication.dir={results}/replicas", "progress=false",
            "sweep.name=bench_peer", f"sweep.models=[{models}]", *extra]


def our_ex(results: Path) -> tuple[int, int, dict]:
    """(correct, scored, {(model, question_id): verdict}) from a results store."""
    import pyarrow.parquet as pq

    verdicts, correct = {}, 0
    for part in sorted((results / "scores").rglob("*.parquet")):
        t = pq.read_table(part, columns=["model", "question_id", "verdict", "correct"]).to_pylist()
        for row in t:
            verdicts[(row["model"], row["question_id"])] = row["verdict"]
    correct = sum(v == "pass" for v in verdicts.values())
    return correct, len(verdicts), verdicts


PEER_EX = re.compile(r"^execution\s+((?:[\d.]+\s+)+)", re.MULTILINE)


def run_peer(args, shared: Path, keep: list[int], work: Path, names: list[tuple[str, str]]) -> dict:
    files = peer_inputs(shared, keep, work)
    return peer_loop(args, shared, len(keep), work, files["__gold__"], [(name, files[base]) for name, base in names])


def peer_loop(args, shared: Path, questions: int, work: Path, gold: Path, preds: list[tuple[str, Path]]) -> dict:
    """The peer's per-set loop: one ``evaluation.py --etype exec`` process per (name, prediction
    file); figures summed (wall, CPU) or maxed (memory) over the sets."""
    total = {"wall_s": 0.0, "tree_s": 0.0, "cpu_s": 0.0, "cpu_sampled_s": 0.0, "peak_rss": 0, "peak_pss": 0, "largest": (0, ""),
             "procs": 0, "lingering": 0, "correct": 0, "scored": 0, "at_peak": []}
    for name, pred in preds:
        r = measure([args.peer_python, "-c", PEER_SHIM, str(Path(args.peer).resolve()), "--gold",
                     str(gold), "--pred", str(pred), "--db", str(shared / "data/spider/database"),
                     "--etype", "exec"], dict(os.environ), str(Path(args.peer).resolve()),
                    work / f"peer-{name}.log", args.sample_s)
        text = (work / f"peer-{name}.log").read_text(errors="replace")
        m = PEER_EX.search(text)
        if r["exit"] != 0 or not m:
            raise SystemExit(f"peer failed on set {name} (exit {r['exit']}): {text[-1500:]}")
        ex = float(m.group(1).split()[4])  # columns: easy medium hard extra all
        total["correct"] += round(ex * questions)
        total["scored"] += questions
        for k in ("wall_s", "tree_s", "cpu_s", "cpu_sampled_s", "lingering"):
            total[k] += r[k]
        total["cpu_how"] = r["cpu_how"]
        for k in ("peak_rss", "peak_pss", "procs"):
            total[k] = max(total[k], r[k])
        if r["peak_rss"] >= total["peak_rss"]:
            total["at_peak"] = r["at_peak"]
        total["largest"] = max(total["largest"], r["largest"])
    return total


def run_ours(label: str, checkout: Path, args, shared: Path, db_ids: list[str], work: Path,
             names: list[tuple[str, str]], extra: list[str]) -> dict:
    results = work / f"results-{label}"
    shutil.rmtree(results, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(checkout), POLYSQL_SHARED=str(shared))
    env.pop("RAY_ADDRESS", None)
    r = measure(our_argv(sys.executable, shared, db_ids, names, results, extra), env, str(checkout),
                work / f"{label}.log", args.sample_s)
    if r["exit"] != 0:
        raise SystemExit(f"{label} failed (exit {r['exit']}): {(work / f'{label}.log').read_text()[-3000:]}")
    r["correct"], r["scored"], r["verdicts"] = our_ex(results)
    return r


def checkout_ref(ref: str, into: Path) -> Path:
    """``git archive`` of ``ref`` unpacked in ``into`` (no worktree metadata is touched)."""
    into.mkdir(parents=True, exist_ok=True)
    arch = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=arch, check=True)
    return into


def contender_list(args, work: Path, peer, ours, extra: list[str]) -> list[tuple[str, object]]:
    """``[(label, run)]`` of a side-by-side benchmark, in order: the peer's loop (``--peer``),
    our code at ``--baseline`` (checked out under ``work``), ours at HEAD (``--ours``, unless
    ``--no-ours``) and each ``--variant`` (extra overrides). ``peer()`` and ``ours(label,
    checkout, overrides)`` run one contender and return its measurement (:func:`measure`).
    Shared by this script and ``bench_realistic.py``."""
    out: list[tuple[str, object]] = []
    if args.peer:
        out.append(("peer per-set loop", peer))
    if args.baseline:
        base = checkout_ref(args.baseline, work / "baseline-src")
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.baseline],
                             capture_output=True, text=True).stdout.strip()
        out.append((f"ours @ {rev} (baseline)", lambda: ours("baseline", base, extra)))
    if not args.no_ours:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = "+dirty" if subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "-uno"],
                                           capture_output=True, text=True).stdout.strip() else ""
        mine = Path(args.ours).resolve()
        if mine != REPO:
            dirty = f" ({mine.name})"
        out.append((f"ours @ {head}{dirty}", lambda: ours("ours", mine, extra)))
        for i, variant in enumerate(args.variant):
            out.append((f"ours variant {i + 1}",
                        functools.partial(ours, f"variant{i + 1}", mine, [*extra, *variant.split()])))
    return out


def at_peak(procs: list[tuple[int, str]]) -> str:
    """``name xN total`` per process name at the tree's peak sample, largest first."""
    by: dict[str, list[int]] = {}
    for rss, name in procs:
        by.setdefault(name, []).append(rss)
    return ", ".join(f"{name} x{len(v)} {sum(v) / 2**20:.0f}" if len(v) > 1 else f"{name} {v[0] / 2**20:.0f}"
                     for name, v in sorted(by.items(), key=lambda kv: -sum(kv[1])))


def row(label: str, r: dict, ref_wall: float | None) -> str:
    mib = 1024 * 1024
    ratio = f"{ref_wall / r['wall_s']:6.2f}x" if ref_wall else "      -"
    return (f"{label:<22} {r['wall_s']:8.1f} {ratio} {r['cpu_s']:8.1f} {r['peak_rss'] / mib:9.0f} "
            f"{r['peak_pss'] / mib:9.0f} {r['largest'][0] / mib:8.0f}  {r['largest'][1][:28]:<28} {r['procs']:5d} "
            f"{r['correct']:>6}/{r['scored']:<6}")


def print_best(repeats: int, results: dict, work: Path) -> None:
    if repeats > 1:
        print("best wall per contender: " + ", ".join(f"{lbl} {min(r['wall_s'] for r in rs):.1f} s"
                                                      for lbl, rs in results.items()))
    print(f"logs and stores: {work}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", help="checkout of test-suite-sql-eval (outside this repository)")
    ap.add_argument("--peer-python", default=sys.executable, help="a Python with nltk, sqlparse, tqdm")
    ap.add_argument("--baseline", help="git ref of this project to compare against (e.g. the previous release)")
    ap.add_argument("--no-ours", action="store_true", help="skip this checkout (peer/baseline only)")
    ap.add_argument("--ours", default=str(REPO), help="the checkout to run as ours (default: this one; e.g. a "
                                                      "`git archive HEAD` copy, so later edits are not measured)")
    ap.add_argument("--variant", action="append", default=[], metavar="OVERRIDES",
                    help="also run this checkout with these space-separated overrides (repeatable), "
                         "e.g. 'pipeline.structural_check=off'")
    ap.add_argument("--sets", type=int, default=21)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--sample-s", type=float, default=0.2)
    ap.add_argument("--shared", default=os.environ.get("POLYSQL_SHARED", str(REPO.parent / "shared")))
    ap.add_argument("--workdir", default=None)
    args, extra = ap.parse_known_args()
    sys.stdout.reconfigure(line_buffering=True)
    extra = [e for e in extra if e != "--"]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: whole-tree CPU cannot be measured")
    shared = Path(args.shared).resolve()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="polysql-bench-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    keep, db_ids = spider_subset(shared)
    names = sets(args.sets)
    print(f"sweep: {len(names)} prediction sets x {len(keep)} Spider dev questions ({len(db_ids)} databases) = "
          f"{len(names) * len(keep)} items, dialect sqlite; sets: {', '.join(n for n, _ in names)}")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"/proc sampled every {args.sample_s} s; work folder {work}")
    contenders = contender_list(
        args, work, lambda: run_peer(args, shared, keep, work, names),
        lambda label, checkout, more: run_ours(label, checkout, args, shared, db_ids, work, names, more), extra)
    header = (f"{'':<22} {'wall s':>8} {'vs 1st':>7} {'CPU s':>8} {'tree RSS':>9} {'tree PSS':>9} "
              f"{'largest':>8}  {'largest process':<28} {'procs':>5} {'EX correct/scored'}")
    results: dict[str, list[dict]] = {}
    for rep in range(args.repeats):
        print(f"repeat {rep}  (MiB for memory; 'vs 1st' = first contender's wall / this wall)\n{header}")
        first = None
        for label, fn in contenders:
            r = fn()
            results.setdefault(label, []).append(r)
            first = first or r["wall_s"]
            print(row(label, r, first), flush=True)
            print(f"{'':<22} at the peak (MiB): {at_peak(r['at_peak'])}")
            print(f"{'':<22} CPU s by process: {cpu_by_name(r)}")
            print(f"{'':<22} tree gone after {r['tree_s']:.1f} s; CPU {r['cpu_how']} (sampled from /proc: "
                  f"{r['cpu_sampled_s']:.1f} s)", flush=True)
            if r.get("lingering"):
                print(f"{'':<22} {r['lingering']} processes still alive 30 s after the top one exited: killed")
    for i, variant in enumerate(args.variant):
        print(f"ours variant {i + 1}: {variant}")
    ours = [lbl for lbl in results if lbl.startswith("ours")]
    for other in ours[1:]:
        a, b = (results[lbl][-1]["verdicts"] for lbl in (ours[0], other))
        diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        print(f"verdicts: {len(diff)} of {len(a.keys() | b.keys())} (model, question) differ between "
              f"{ours[0]} and {other}" + (f", e.g. {diff[:5]}" if diff else ""))
    print_best(args.repeats, results, work)


if __name__ == "__main__":
    main()
