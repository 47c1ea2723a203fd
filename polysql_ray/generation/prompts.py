"""Versioned prompt templates for text-to-SQL generation in a target dialect.

Instruction level ``"XY"`` (PolySQL arXiv 2605.07796, instruction levels):

* X (reasoning): ``1`` answer only; ``2`` think step by step first, then answer.
* Y (dialect guidance): ``1`` generic (dialect named only); ``2`` plus the dialect's rules
  (``dialect_rules/<dialect>.yaml``: quoting, casts, dates, concatenation, LIMIT forms, case
  sensitivity, integer division, NULL order); ``3`` rules plus a worked example in that dialect.

Every prompt contains the schema as DDL of the target dialect (:mod:`schema_ddl`: the same
identifiers and keys in every dialect), optional sample rows, the dataset's evidence when
present, and the question. The answer format is always "one fenced ```sql block", which is
what :func:`polysql_ray.generation.extraction.extract_sql` reads.

:data:`TEMPLATE_VERSION` is bumped on any change to the wording or to a rules file's format;
the prompt's sha256 (which covers the version and the rendered messages) is part of every
generation key, so changed prompts are regenerated and unchanged ones are not.
"""
from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import yaml

from polysql_ray.datasets.base import FILE_ENGINES
from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.generation import schema_ddl
from polysql_ray.generation.schema_ddl import ColumnSpec, ForeignKeySpec, SchemaSpec, TableSpec
from polysql_ray.replication.base import ReplicationError

#: Bump on any change to the templates below or to the rules-file format.
TEMPLATE_VERSION = "2"

RULES_DIR = Path(__file__).with_name("dialect_rules")

#: Rule topics in the order they are shown (a rules file may add more; they follow).
RULE_ORDER = ("quoting", "casts", "dates", "concatenation", "limit", "case_sensitivity",
              "integer_division", "nulls", "grouping")

SYSTEM_TEMPLATE = (
    "You are an expert data analyst who writes correct {display_name} SQL queries. "
    "You answer questions about a database with exactly one read-only SELECT statement "
    "written in the {display_name} dialect."
)

#: Reasoning instruction (X of the level).
REASONING_TEMPLATES: dict[str, str] = {
    "1": ("Answer with only the SQL query inside a single ```sql code block. "
          "Do not explain it."),
    "2": ("First think step by step: identify the tables and columns needed, the joins, the "
          "filters and the {display_name}-specific syntax. Then give the final query inside a "
          "single ```sql code block at the end of your answer."),
}

#: Dialect guidance (Y of the level): which sections appear.
GUIDANCE_SECTIONS: dict[str, tuple[str, ...]] = {"1": (), "2": ("rules",), "3": ("rules", "example")}

#: The worked example's schema (levels X3), rendered in the target dialect like any schema.
EXAMPLE_SCHEMA = SchemaSpec(tables=(
    TableSpec("departments", [
        ColumnSpec("department_id", "INTEGER", "INTEGER", not_null=True),
        ColumnSpec("name", "TEXT", "VARCHAR"),
    ], primary_key=("department_id",)),
    TableSpec("employees", [
        ColumnSpec("employee_id", "INTEGER", "INTEGER", not_null=True),
        ColumnSpec("first_name", "TEXT", "VARCHAR"),
        ColumnSpec("last_name", "TEXT", "VARCHAR"),
        ColumnSpec("hire_date", "TEXT", "VARCHAR"),
        ColumnSpec("department_id", "INTEGER", "INTEGER"),
    ], primary_key=("employee_id",),
        foreign_keys=(ForeignKeySpec(("department_id",), "departments", ("department_id",)),)),
))


@dataclass(frozen=True)
class InstructionLevel:
    """A parsed instruction level ``"XY"``.

    Attributes:
        reasoning: X: ``"1"`` answer only, ``"2"`` think step by step first.
        guidance: Y: ``"1"`` generic, ``"2"`` dialect rules, ``"3"`` rules + worked example.
    """

    reasoning: str
    guidance: str

    @classmethod
    def parse(cls, level: str) -> "InstructionLevel":
        """Parse ``"11"`` .. ``"23"``.

        Raises:
            ValueError: for anything else.
        """
        level = str(level).strip()
        if len(level) != 2 or level[0] not in REASONING_TEMPLATES or level[1] not in GUIDANCE_SECTIONS:
            raise ValueError(f"instruction level must be XY with X in {sorted(REASONING_TEMPLATES)} "
                             f"and Y in {sorted(GUIDANCE_SECTIONS)}, got {level!r}")
        return cls(level[0], level[1])

    def __str__(self) -> str:
        return self.reasoning + self.guidance


#: All instruction levels, in order.
INSTRUCTION_LEVELS: tuple[str, ...] = tuple(x + y for x in REASONING_TEMPLATES for y in GUIDANCE_SECTIONS)


@dataclass(frozen=True)
class DialectRules:
    """One dialect's rules file (``dialect_rules/<dialect>.yaml``).

    Attributes:
        dialect: sqlglot dialect name.
        display_name: human name used in prompts (``PostgreSQL``).
        rules: ``{topic: sentence}`` (see :data:`RULE_ORDER`).
        example_question / example_sql: the worked example over :data:`EXAMPLE_SCHEMA`.
    """

    dialect: str
    display_name: str
    rules: tuple[tuple[str, str], ...]
    example_question: str
    example_sql: str


def available_dialects() -> tuple[str, ...]:
    """Dialects that have a rules file, sorted."""
    return tuple(sorted(p.stem for p in RULES_DIR.glob("*.yaml")))


@functools.lru_cache(maxsize=None)
def load_dialect_rules(dialect: str) -> DialectRules:
    """Load and validate one dialect's rules file.

    Raises:
        ValueError: unknown dialect (no rules file) or a file missing required keys.
    """
    path = RULES_DIR / f"{dialect}.yaml"
    if not path.is_file():
        raise ValueError(f"no dialect rules for {dialect!r}; available: {', '.join(available_dialects())}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    missing = [k for k in ("dialect", "display_name", "rules", "example") if k not in data]
    missing += [f"rules.{k}" for k in RULE_ORDER[:7] if k not in data.get("rules", {})]
    if missing or data["dialect"] != dialect:
        raise ValueError(f"{path}: missing {missing} or dialect field != {dialect!r}")
    rules = data["rules"]
    ordered = [k for k in RULE_ORDER if k in rules] + [k for k in rules if k not in RULE_ORDER]
    return DialectRules(dialect, data["display_name"], tuple((k, str(rules[k]).strip()) for k in ordered),
                        str(data["example"]["question"]).strip(), str(data["example"]["sql"]).strip())


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt.

    Attributes:
        messages: chat messages ``[{"role": "system"|"user", "content": str}, ...]``.
        text: the same content as one string (for completion-style endpoints and logs).
        sha256: hex digest over ``TEMPLATE_VERSION`` and ``messages`` (canonical JSON);
            part of every generation key.
    """

    messages: list[dict]
    text: str
    sha256: str


@functools.lru_cache(maxsize=64)
def _cached_schema(database: SourceDatabase, stamp: int, sample_rows: int) -> SchemaSpec:
    return schema_ddl.read_schema(database, sample_rows=sample_rows)


def schema_for_example(example: Example, sample_rows: int = 0) -> SchemaSpec:
    """The source database's schema for ``example``, read by its engine's replication reader
    (SQLite, MySQL ...; cached per database and, for files, modification time).

    Raises:
        FileNotFoundError: a file source is absent.
        ReplicationError: the source cannot be read (no reader for its engine, server down).
    """
    db = example.database
    stamp = 0
    if db.engine in FILE_ENGINES:
        p = Path(db.location)
        if not p.is_file():
            raise FileNotFoundError(f"source database missing: {p}")
        stamp = p.stat().st_mtime_ns
    return _cached_schema(db, stamp, sample_rows)


def _rules_section(rules: DialectRules) -> str:
    lines = [f"{rules.display_name} rules to follow:"]
    lines += [f"- {topic.replace('_', ' ')}: {text}" for topic, text in rules.rules]
    return "\n".join(lines)


def _example_section(rules: DialectRules, dialect: str) -> str:
    return (f"Worked example in {rules.display_name}.\nSchema:\n"
            f"{schema_ddl.render_schema(EXAMPLE_SCHEMA, dialect)}\n"
            f"Question: {rules.example_question}\nAnswer:\n```sql\n{rules.example_sql}\n```")


def render_prompt(example: Example, dialect: str, level: str, schema: SchemaSpec | str,
                  sample_rows: int = 0) -> RenderedPrompt:
    """Render the prompt for one example in one dialect at one instruction level.

    Args:
        example: the question (its ``evidence`` is included when non-empty).
        dialect: target sqlglot dialect name with a rules file (see :func:`available_dialects`).
        level: instruction level ``"XY"`` (see module docstring).
        schema: the source schema (:class:`SchemaSpec`, rendered as ``dialect`` DDL) or
            already rendered DDL text.
        sample_rows: sample rows per table to show (needs a SchemaSpec read with rows).

    Returns:
        A :class:`RenderedPrompt`; identical inputs give an identical sha256.

    Raises:
        ValueError: unknown dialect or malformed level.
    """
    lvl = InstructionLevel.parse(level)
    rules = load_dialect_rules(dialect)
    ddl = schema if isinstance(schema, str) else schema_ddl.render_schema(schema, dialect, sample_rows)
    system = SYSTEM_TEMPLATE.format(display_name=rules.display_name)
    parts = []
    sections = GUIDANCE_SECTIONS[lvl.guidance]
    if "rules" in sections:
        parts.append(_rules_section(rules))
    if "example" in sections:
        parts.append(_example_section(rules, dialect))
    parts.append(f"Database schema ({rules.display_name}):\n{ddl}")
    if example.evidence and example.evidence.strip():
        parts.append(f"Evidence: {example.evidence.strip()}")
    parts.append(f"Question: {example.question.strip()}")
    parts.append(REASONING_TEMPLATES[lvl.reasoning].format(display_name=rules.display_name))
    user = "\n\n".join(parts)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    text = f"{system}\n\n{user}"
    digest = hashlib.sha256(json.dumps({"template_version": TEMPLATE_VERSION, "messages": messages},
                                       sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    return RenderedPrompt(messages, text, digest)


def prompt_for(example: Example, dialect: str, level: str, sample_rows: int = 0) -> RenderedPrompt:
    """Render the prompt for ``example`` reading its schema from the source database.

    The one function generators and the pipeline both call, so the prompt sha256 the
    pipeline puts in the generation key is the prompt the model saw.

    Raises:
        ValueError / FileNotFoundError: see :func:`schema_for_example` and :func:`render_prompt`.
    """
    schema = schema_for_example(example, sample_rows)
    return render_prompt(example, dialect, level, schema, sample_rows)


@dataclass(frozen=True)
class Sampling:
    """Decoding settings shared by every model generator.

    Attributes:
        temperature: 0 means greedy decoding.
        top_p: nucleus mass (ignored when greedy).
        max_tokens: most completion tokens per example.
        seed: sampling seed (per request where the backend supports it).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int = 0

    @classmethod
    def from_mapping(cls, m) -> "Sampling":
        """Build from a config mapping (unknown keys are rejected with ValueError)."""
        m = dict(m or {})
        unknown = set(m) - {"temperature", "top_p", "max_tokens", "seed"}
        if unknown:
            raise ValueError(f"unknown sampling keys: {sorted(unknown)}")
        return cls(**m)


def generator_fingerprint(kind: str, model_id: str, revision: str, sampling: Sampling,
                          **extra) -> str:
    """The fingerprint string of a model generator (``Generator.fingerprint``).

    Covers the generator kind, model id, revision, sampling parameters, seed,
    :data:`TEMPLATE_VERSION` and any ``extra`` setting that can change outputs (chat
    template, dtype ...). The per-example prompt sha256 is added by the pipeline.

    Returns:
        ``"<kind>:<model_id>@<revision>:<sha256 prefix>"`` (stable across processes).
    """
    payload = {"kind": kind, "model_id": model_id, "revision": revision or "",
               "sampling": sampling.__dict__, "template_version": TEMPLATE_VERSION,
               "extra": {k: extra[k] for k in sorted(extra)}}
    h = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{kind}:{model_id}@{revision or 'unpinned'}:t{TEMPLATE_VERSION}:{h}"


def render_all(examples, dialect: str, level: str, sample_rows: int = 0):
    """Render prompts for a batch; an example whose prompt cannot be built gets an error.

    Args:
        examples: sequence of :class:`Example`.
        dialect / level / sample_rows: as for :func:`prompt_for`.

    Returns:
        ``(prompts, errors)``: ``prompts[i]`` is a :class:`RenderedPrompt` or None, and
        ``errors[i]`` a message for each None (missing database, ``gold_error`` ...).

    Raises:
        ValueError: unknown dialect or malformed level (a configuration error, not per example).
    """
    InstructionLevel.parse(level)
    load_dialect_rules(dialect)
    prompts: list[RenderedPrompt | None] = []
    errors: dict[int, str] = {}
    for i, ex in enumerate(examples):
        try:
            if not ex.database.exists:
                raise FileNotFoundError(ex.gold_error or f"source database {ex.db_id!r} is missing")
            prompts.append(prompt_for(ex, dialect, level, sample_rows))
        except (OSError, ValueError, sqlite3.Error, ReplicationError) as e:
            prompts.append(None)
            errors[i] = f"cannot build prompt: {type(e).__name__}: {e}"
    return prompts, errors
