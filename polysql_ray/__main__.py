"""``python -m polysql_ray [+sweep=NAME] [key=value ...]``: compose the config, run the grid.

Examples::

    python -m polysql_ray +sweep=quickstart
    python -m polysql_ray +sweep=spider_published
    python -m polysql_ray dataset=spider dataset.root=PATH model=replay model.predictions=FILE \\
        dialects=[sqlite,duckdb] results_dir=DIR
"""
from __future__ import annotations

import logging
import re
import sys

import hydra
from omegaconf import DictConfig

from polysql_ray.config import CONF_DIR, make_conf_loader, redacted_yaml, to_plain
from polysql_ray.jobs_cli import stdout_closed
from polysql_ray.redaction import install_log_redaction, redact_text


def _run(cfg: DictConfig) -> int:
    from rich.console import Console

    from polysql_ray.lazy import arrow_without_pandas
    from polysql_ray.pipeline.driver import run
    from polysql_ray.pipeline.summary import csv_bytes, render
    from polysql_ray.store.parquet import ResultsStore

    arrow_without_pandas()  # the CLI's own process (polysql_ray.lazy): 41 MiB and 0.4 s less

    console = Console() if sys.stdout.isatty() else Console(width=200)
    install_log_redaction()  # every log line of the run: secrets masked (polysql_ray.redaction)
    plain = to_plain(cfg)
    stats, table = run(plain, make_conf_loader(plain), redacted_yaml(cfg), console=Console(stderr=True))
    name = (plain.get("sweep") or {}).get("name") or "single"
    render(table, console, title=f"Execution accuracy (EX, %) — {name}")
    store = ResultsStore(plain["results_dir"], plain.get("store"))
    root = store.uri  # a local folder or s3://bucket/prefix
    csv_path = store.write_bytes("ex_table.csv", csv_bytes(table))
    store.write_bytes(f"runs/{stats.run_id}/ex_table.csv", csv_bytes(table))
    engine_s = sum(stats.engine_s.values())
    console.print(
        f"cells {stats.cells} | predictions {stats.items_total}: scored {stats.items_scored}, "
        f"already stored {stats.items_skipped} | executions requested "
        f"{sum(stats.exec_requested.values())}, unique {sum(stats.exec_unique.values())}, "
        f"repeated {getattr(stats, 'exec_repeated', 0)} | "
        f"replicas {stats.replicas} ({stats.replicas - stats.replicas_reused} built, "
        f"{stats.replicas_reused} reused) | engine time {engine_s:.1f}s | wall {stats.wall_s:.1f}s")
    g = stats.generation
    if g is not None and g.cells:
        console.print(f"generation: cells {g.cells} | generated {g.generated} | reused {g.reused} | "
                      f"unrenderable {g.unrenderable} | {g.seconds:.1f}s")
    if stats.proven:
        console.print(f"structural proofs: {stats.proven} predictions proven equivalent "
                      f"({'executed too' if plain['pipeline'].get('structural_check') == 'verify' else 'not executed'})")
    from polysql_ray.pipeline.summary import stage_lines

    if stats.exec_reused:
        console.print(f"execution reuse: {stats.exec_reused} needs met by an execution already run or "
                      f"running (gold results shared across models and dialects)")
    if getattr(stats, "verdicts_reused", 0):
        console.print(f"verdict reuse: {stats.verdicts_reused} items not rescored: an identical item "
                      f"(question, gold and predicted SQL, execution results, policy) was scored this run")
    if stats.suite is not None:  # suite EX: what it added (README "Distilled test suites": cost)
        f = stats.suite.summary()
        console.print(f"suites: {f['suites']} ({f['suites_reused']} reused, {f['suite_databases']} databases, "
                      f"build {f['build_s']:.1f}s, copies {f['copies']} in {f['replicate_s']:.1f}s, "
                      f"{f['copies_failed']} failed) | rows {f['rows']}: {f['rows_on_suite']} passed and ran on "
                      f"the suite, {f['rows_proven']} proven | suite executions requested "
                      f"{sum(f['exec_requested'].values())}, unique {sum(f['exec_unique'].values())}")
    for line in stage_lines(stats):
        console.print(f"stage {line}", highlight=False, markup=False)
    console.print(f"store: {root}/scores/**/*.parquet  EX table: {store.location.display(str(csv_path))}  "
                  f"run: {root}/runs/{stats.run_id}")
    if stats.crashed or stats.actor_failures:
        console.print(f"execution actors: {stats.actor_failures} batches resubmitted after an actor "
                      f"died; {stats.crashed} statements isolated for killing their engine process")
    code = 0
    if stats.errors:
        for line in stats.errors:
            print(f"polysql_ray: error: {redact_text(line)}", file=sys.stderr)
        print("polysql_ray: the work that needed these copies was not scored; fix the cause and rerun "
              "(everything scored above is kept)", file=sys.stderr)
        code = 2
    if stats.unavailable:
        left = ", ".join(f"{n} on {e} ({redact_text(stats.unavailable_examples.get(e, ''))[:160]})"
                         for e, n in sorted(stats.unavailable.items()))
        print(f"polysql_ray: error: {sum(stats.unavailable.values())} predictions could not run "
              f"(infrastructure, not the model): {left}; stored as `unavailable` in "
              f"{root}/unavailable, excluded from EX; rerun to score them", file=sys.stderr)
        code = code or 3
    return code


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from polysql_ray.errors import user_error_message

    try:
        code = _run(cfg)
    except KeyboardInterrupt:
        print("interrupted: every batch already scored is in the store; rerun to resume", file=sys.stderr)
        code = 130
    except Exception as exc:  # a clear message for known user errors, a traceback otherwise
        msg = user_error_message(exc)
        if msg is None:
            raise
        print(f"polysql_ray: error: {redact_text(msg)}", file=sys.stderr)
        code = 2
    if code:
        sys.exit(code)


def composition_error(overrides: list[str]) -> str | None:
    """One line naming what to fix when ``overrides`` (plain ``key=value`` arguments) do not
    compose (a misspelt key, a bad value, a missing config group option); None when they do.
    Hydra itself would print several lines, suggest ``+key`` for a misspelt key, and exit 1."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            compose(config_name="config", overrides=overrides)
    except Exception as exc:  # noqa: BLE001 — hydra/omegaconf composition errors of every kind
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        cause = exc.__cause__ or exc.__context__
        why = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else ""
        key = re.search(r"Could not override '([^']+)'", first)
        if key and "not in struct" in why:
            return (f"no config key {key.group(1)!r}: check its spelling against the README's parameter "
                    f"table (a key the project does not define cannot be set)")
        options = re.search(r"Available options in '([^']+)':\n((?:\s+\S+\n?)+)", str(exc))
        if options:
            names = ", ".join(options.group(2).split())
            return f"{first}; available options in {options.group(1)!r}: {names}"
        return f"{first}{': ' + why if why and why not in first else ''}"
    return None


def main() -> None:
    """Console-script entry point (``polysql-ray``). Plain ``key=value`` overrides are composed
    first, so a bad one is one line and exit 2 (:func:`composition_error`); Hydra's own flags
    (``--help``, ``-m``, ``hydra.*``) go to Hydra as they are."""
    logging.getLogger("ray").setLevel(logging.WARNING)
    args = sys.argv[1:]
    if args and not any(a.startswith("-") or a.startswith(("hydra.", "hydra/", "+hydra")) for a in args):
        msg = composition_error(args)
        if msg is not None:
            print(f"polysql_ray: error: {redact_text(msg)}", file=sys.stderr)
            sys.exit(2)
    try:
        _hydra_main()
    except BrokenPipeError:
        sys.exit(stdout_closed("polysql_ray"))



if __name__ == "__main__":
    main()
