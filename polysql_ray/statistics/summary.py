"""All statistics of one results store in one call (what the leaderboard snapshot renders)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .agreement import difficulty_hierarchy, holm_adjust, pairwise_dialects
from .artefacts import format_artefacts
from .provenance import engine_provenance, judge_provenance
from .ex import drop_from_baseline, ex_table, paired_drop
from .native_gold import MODEL_PREFIX, read_agreement
from .load import CELL, DEFAULT_COUNTING, SCORES_TABLE, CountingPolicy, LoadSummary, load_scores
from .ranking import ALL, model_ranks, rank_instability, rank_intervals
from .taxonomy import error_taxonomy, judge_taxonomy


@dataclass(frozen=True)
class StatsConfig:
    """Knobs of :func:`compute_statistics`.

    Attributes:
        baseline: reference dialect for drops and rank instability (the source engine's).
        alpha: significance level and 1 - CI level.
        ci_method: ``wilson`` (default) or another :data:`polysql_ray.statistics.ex.CI_METHODS`.
        p_adjust: multiple-testing correction for the hierarchy's adjacent tests, or None.
        policy_version: keep only rows scored under this comparison policy version.
        exclude_generators: rows of these generators are left out. Default ``("gold",)``:
            the gold generator replays the gold SQL as a whole-pipeline sanity check; it is not
            a model and would bias pooled kappa/McNemar and the rankings.
        exclude_model_prefixes: rows of models whose name starts with one of these are left out.
            Default ``("native_gold_",)``: ``jobs.fidelity step=native`` replays independently
            written gold as predictions; its figure is each dialect's verdict agreement
            (``Statistics.native_gold_agreement``), not a model's EX.
        include_standins: dialects scored on a stand-in engine (``provenance``) count in the
            leaderboard's pooled means; default False: they are shown, badged, but not pooled.
        policy: the comparison policy (row column ``policy``) every table is computed under;
            None: ``default`` when the store holds it, else the first name in order. EX under
            every policy of the store is ``Statistics.ex_policies``.
    """

    baseline: str = "sqlite"
    alpha: float = 0.05
    ci_method: str = "wilson"
    p_adjust: str | None = "holm"
    policy_version: str | None = None
    exclude_generators: tuple[str, ...] = ("gold",)
    exclude_model_prefixes: tuple[str, ...] = (MODEL_PREFIX,)
    counting: CountingPolicy = DEFAULT_COUNTING
    include_standins: bool = False
    policy: str | None = None


@dataclass
class Statistics:
    """Every table of one store; each table is a list of dicts sorted deterministically.

    Attributes:
        load: what was read (:class:`LoadSummary`).
        config: the :class:`StatsConfig` used.
        ex_cells: EX per (model, dataset, dialect, instruction_level) (:func:`ex_table`).
        ex_model_dialect: EX per (model, dialect), pooled over datasets and levels.
        ex_dialect: EX per dialect, pooled over everything.
        drops: drop from the baseline per cell (:func:`drop_from_baseline`).
        drops_model: drop from the baseline per (model, dialect), pooled.
        pairwise_model: kappa / McNemar per model and dialect pair.
        pairwise_pooled: kappa / McNemar per dialect pair, pooled over models.
        hierarchy: dialect difficulty hierarchy (:func:`difficulty_hierarchy`).
        ranks: model rank per dialect, pooled (:func:`model_ranks`).
        rank_instability: Kendall's tau vs the baseline, pooled and per (dataset, level).
        taxonomy_dialect: rule-based error classes per dialect.
        taxonomy_model_dialect: rule-based error classes per (model, dialect).
        ex_dataset: EX per (dataset, model, dialect), pooled over instruction levels.
        gold_portability: EX of the ``gold`` generator (the gold SQL run on each dialect) per
            (dataset, dialect), and pooled (``dataset = "ALL"``): how much of the gold itself
            survives the dialect change, the context of every model's drop. A reference, not a
            bound: a model that writes the target dialect's SQL can exceed it.
        drops_paired: drop from the baseline per (model, dialect) on paired questions with a
            paired CI (:func:`paired_drop`).
        rank_intervals: per dialect, each model's plausible rank range (:func:`rank_intervals`).
        judge_taxonomy_model_dialect: judge-based error classes per (model, dialect), when the
            judge job has run (:func:`judge_taxonomy`); empty otherwise.
        judge_agreement: judge family vs rule family counts (:func:`judge_taxonomy`).
        provenance: per dialect, the engine it ran on (product, version, stand-in, settings,
            limits) as the runs recorded it (:func:`~polysql_ray.statistics.provenance.engine_provenance`).
        judges: each judge's identity, stand-ins marked (:func:`~polysql_ray.statistics.provenance.judge_provenance`).
        format_artefacts: per cell, failures flagged as format artefacts (``fn_space``:
            ``count ( * )`` refused by the server's sql_mode; ``identifier_case``: a name that
            exists only in another case) (:func:`~polysql_ray.statistics.artefacts.format_artefacts`).
        native_gold_agreement: per (dataset, dialect) the share of independently written native
            gold the evaluator calls correct, with scored, agree, disagreements and their reasons
            (``jobs.fidelity step=native``; :func:`polysql_ray.statistics.native_gold.read_agreement`);
            empty until it has run.
        policy: the comparison policy the other tables are computed under (``StatsConfig.policy``).
        policies: every policy name in the store, ``policy`` first.
        ex_policies: EX per (model, dialect, policy), pooled over datasets and levels, for every
            policy of the store (rows of each scored from the same executions: ``policies=[...]``).
    """

    load: LoadSummary
    config: StatsConfig
    ex_cells: list[dict] = field(default_factory=list)
    ex_model_dialect: list[dict] = field(default_factory=list)
    ex_dialect: list[dict] = field(default_factory=list)
    drops: list[dict] = field(default_factory=list)
    drops_model: list[dict] = field(default_factory=list)
    pairwise_model: list[dict] = field(default_factory=list)
    pairwise_pooled: list[dict] = field(default_factory=list)
    hierarchy: list[dict] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)
    rank_instability: list[dict] = field(default_factory=list)
    taxonomy_dialect: list[dict] = field(default_factory=list)
    taxonomy_model_dialect: list[dict] = field(default_factory=list)
    ex_dataset: list[dict] = field(default_factory=list)
    gold_portability: list[dict] = field(default_factory=list)
    drops_paired: list[dict] = field(default_factory=list)
    rank_intervals: list[dict] = field(default_factory=list)
    judge_taxonomy_model_dialect: list[dict] = field(default_factory=list)
    judge_agreement: list[dict] = field(default_factory=list)
    provenance: list[dict] = field(default_factory=list)
    judges: list[dict] = field(default_factory=list)
    format_artefacts: list[dict] = field(default_factory=list)
    native_gold_agreement: list[dict] = field(default_factory=list)
    policy: str = "default"
    policies: list[str] = field(default_factory=list)
    ex_policies: list[dict] = field(default_factory=list)

    def tables(self) -> dict[str, list[dict]]:
        """The tables by name (everything except ``load`` and ``config``)."""
        return {k: v for k, v in vars(self).items() if k not in ("load", "config", "policy", "policies")}

    def meta(self) -> dict:
        """``load`` and ``config`` as plain dicts."""
        load = asdict(self.load)
        load["policy_versions"] = list(load["policy_versions"])
        load["duplicates_dropped"] = self.load.duplicates_dropped
        cfg = asdict(self.config)
        cfg["counting"] = {k: list(v) if isinstance(v, tuple) else v
                           for k, v in cfg["counting"].items()}
        return {"load": load, "config": cfg}


def compute_statistics(results_dir: str | Path, config: StatsConfig = StatsConfig()) -> Statistics:
    """Load the store (deduplicated) and compute every statistic.

    Raises:
        FileNotFoundError: no Parquet file under ``<results_dir>/scores``.
    """
    from dataclasses import replace as _replace

    con, _ = load_scores(results_dir, policy_version=config.policy_version,
                         exclude_generators=config.exclude_generators, counting=config.counting,
                         exclude_model_prefixes=config.exclude_model_prefixes)
    try:
        names = [r[0] for r in con.execute(f"SELECT DISTINCT policy FROM {SCORES_TABLE} ORDER BY 1").fetchall()]
        ex_policies = ex_table(con, ("model", "dialect", "policy"), config.alpha, config.ci_method) \
            if len(names) > 1 else []
    finally:
        con.close()
    if config.policy is not None and names and config.policy not in names:
        from polysql_ray.errors import ConfigError

        raise ConfigError(f"policy={config.policy}: the store holds no scores under that comparison policy; "
                          f"its policies: {', '.join(names)}")
    primary = config.policy or ("default" if "default" in names or not names else names[0])
    config = _replace(config, policy=primary)
    con, load = load_scores(results_dir, policy_version=config.policy_version,
                            exclude_generators=config.exclude_generators,
                            exclude_model_prefixes=config.exclude_model_prefixes,
                            counting=config.counting, policy=primary)
    try:
        a, m = config.alpha, config.ci_method
        scope = ("dataset", "instruction_level")  # pooled rows get "ALL" for both
        st = Statistics(load=load, config=config, policy=primary,
                        policies=[primary] + [n for n in names if n != primary], ex_policies=ex_policies)
        st.ex_cells = ex_table(con, CELL, a, m)
        st.ex_model_dialect = ex_table(con, ("model", "dialect"), a, m)
        st.ex_dialect = ex_table(con, ("dialect",), a, m)
        st.drops = drop_from_baseline(st.ex_cells, config.baseline)
        st.drops_model = drop_from_baseline(st.ex_model_dialect, config.baseline)
        st.pairwise_model = holm_adjust(pairwise_dialects(con, ("model",)), a, config.p_adjust,
                                        ("model",))
        st.pairwise_pooled = holm_adjust(pairwise_dialects(con, ()), a, config.p_adjust)
        st.hierarchy = difficulty_hierarchy(st.ex_dialect, st.pairwise_pooled, a, config.p_adjust)
        st.ranks = model_ranks(st.ex_model_dialect)
        st.rank_instability = (
            rank_instability(st.ex_model_dialect, config.baseline, scope)
            + rank_instability(st.ex_cells, config.baseline, scope)
        )
        st.taxonomy_dialect = error_taxonomy(con, ("dialect",))
        st.taxonomy_model_dialect = error_taxonomy(con, ("model", "dialect"))
        st.ex_dataset = ex_table(con, ("dataset", "model", "dialect"), a, m)
        st.drops_paired = paired_drop(st.pairwise_model, config.baseline, a)
        st.rank_intervals = rank_intervals(st.ex_model_dialect)
        st.judge_taxonomy_model_dialect, st.judge_agreement = judge_taxonomy(con, results_dir)
        st.provenance = engine_provenance(results_dir)
        st.format_artefacts = format_artefacts(con, results_dir, st.provenance)
    finally:
        con.close()
    st.gold_portability = gold_portability(results_dir, config)
    st.judges = judge_provenance(results_dir)
    st.native_gold_agreement = read_agreement(results_dir)
    return st


def gold_portability(results_dir: str | Path, config: StatsConfig = StatsConfig()) -> list[dict]:
    """EX of the ``gold`` generator per (dataset, dialect) and pooled (``dataset = "ALL"``).

    Returns:
        :func:`ex_table` rows with ``dataset`` and ``dialect``; empty when no gold rows.
    """
    try:
        con, load = load_scores(results_dir, policy_version=config.policy_version,
                                only_generators=("gold",), counting=config.counting,
                                policy=config.policy)
    except FileNotFoundError:
        return []
    try:
        if not load.rows_kept:
            return []
        a, m = config.alpha, config.ci_method
        rows = ex_table(con, ("dataset", "dialect"), a, m)
        rows += [{"dataset": ALL, **r} for r in ex_table(con, ("dialect",), a, m)]
        return rows
    finally:
        con.close()
