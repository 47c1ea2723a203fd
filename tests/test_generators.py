"""Replay and gold generators and the generator registry (real Spider prediction files)."""
from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from polysql_ray.datasets import load_dataset
from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.generation.base import GenStatus
from polysql_ray.generation.gold import GoldGenerator
from polysql_ray.generation.registry import GENERATORS, GeneratorConfigError, make_generator
from polysql_ray.generation.replay import ReplayError, ReplayGenerator

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POLYSQL_SHARED", REPO.parent / "shared"))
SPIDER = SHARED / "data" / "spider"
PRED_DIR = SHARED / "data" / "predictions" / "spider_dev"
PRED_FILES = ["dail_sql_gpt4", "c3sql_gpt35", "resdsql_3b", "codes_15b_sft"]


@pytest.fixture(scope="module")
def spider():
    if not (SPIDER / "dev.json").is_file() or not PRED_DIR.is_dir():
        pytest.skip(f"shared Spider data / predictions not found under {SHARED} (set POLYSQL_SHARED)")
    return load_dataset({"name": "spider", "layout": "spider", "root": str(SPIDER)})


def _examples(n: int, db_id: str = "db") -> list[Example]:
    src = SourceDatabase("t", db_id, "sqlite", "/nonexistent.sqlite", False)
    return [Example("t", f"q{i}", db_id, f"question {i}", "", f"SELECT {i}", "sqlite", "sqlite", src,
                    position=i, extra={"dataset_size": n}) for i in range(n)]


@pytest.mark.parametrize("name", PRED_FILES)
def test_replay_real_prediction_files(spider, name):
    path = PRED_DIR / f"{name}.sql"
    gen = make_generator({"name": name, "generator": "replay", "predictions": str(path)})
    preds = gen.generate(spider, "sqlite", "none")
    assert len(preds) == 1034 and gen.n_predictions == 1034
    assert [p.question_id for p in preds] == [e.question_id for e in spider]
    assert all(p.status is GenStatus.OK for p in preds)
    # line ends, trailing ';' and surrounding whitespace removed; text otherwise as in the file
    assert not any(p.pred_sql != p.pred_sql.strip() or "\r" in p.pred_sql or "\n" in p.pred_sql
                   or p.pred_sql.endswith(";") for p in preds)
    raw_lines = path.read_bytes().decode().replace("\r\n", "\n").split("\n")
    assert preds[0].pred_sql == raw_lines[0].strip().rstrip(";")
    assert preds[-1].pred_sql == raw_lines[1033].strip().rstrip(";")
    assert gen.fingerprint().startswith("replay-v1:") and len(gen.fingerprint()) == len("replay-v1:") + 64


def test_replay_fingerprints_differ_per_file(spider):
    fps = {ReplayGenerator(n, PRED_DIR / f"{n}.sql").fingerprint() for n in PRED_FILES}
    assert len(fps) == len(PRED_FILES)


def test_replay_file_specifics(spider):
    c3 = ReplayGenerator("c3", PRED_DIR / "c3sql_gpt35.sql").generate(spider, "duckdb", "none")
    assert b"\r\n" in (PRED_DIR / "c3sql_gpt35.sql").read_bytes()        # CRLF file
    assert c3[0].pred_sql == "SELECT COUNT(*) FROM singer" and c3[0].raw_output.endswith(";")
    assert sum("\t" in p.pred_sql for p in c3) == 1                       # a tab inside SQL is kept
    dail = PRED_DIR / "dail_sql_gpt4.sql"
    assert not dail.read_bytes().endswith(b"\n")                          # missing final newline
    assert len(ReplayGenerator("d", dail).generate(spider, "sqlite", "none")) == 1034
    resd = ReplayGenerator("r", PRED_DIR / "resdsql_3b.sql").generate(spider, "sqlite", "none")
    assert resd[0].pred_sql == "select count ( * ) from singer"           # lower case kept


def test_replay_gold_file_with_tab_db_id(spider):
    preds = ReplayGenerator("gold_file", SPIDER / "dev_gold.sql").generate(spider, "sqlite", "none")
    assert [p.pred_sql for p in preds] == [e.gold_sql.strip().rstrip(";").strip() for e in spider]


def test_replay_filtered_examples_use_positions(spider):
    sub = [e for e in spider if e.db_id == "pets_1"]
    preds = ReplayGenerator("g", SPIDER / "dev_gold.sql").generate(sub, "sqlite", "none")
    assert [p.pred_sql for p in preds] == [e.gold_sql.strip().rstrip(";").strip() for e in sub]


def test_replay_line_count_mismatch(tmp_path):
    f = tmp_path / "p.sql"
    f.write_bytes(b"SELECT 0;\r\nSELECT 1\r\n")
    with pytest.raises(ReplayError, match=r"p\.sql has 2 lines but the dataset has 3 examples"):
        ReplayGenerator("m", f).generate(_examples(3), "sqlite", "none")
    preds = ReplayGenerator("m", f, allow_partial=True).generate(_examples(3), "sqlite", "none")
    assert [p.status for p in preds] == [GenStatus.OK, GenStatus.OK, GenStatus.MISSING]
    assert preds[1].pred_sql == "SELECT 1" and "q2" in preds[2].error


def test_replay_empty_line_tab_suffix_and_fingerprint(tmp_path):
    f = tmp_path / "p.sql"
    f.write_text("SELECT 0\tdb\n   \nSELECT 'a\tb'\tother\n")
    preds = ReplayGenerator("m", f).generate(_examples(3), "sqlite", "none")
    assert preds[0].pred_sql == "SELECT 0"
    assert preds[1].status is GenStatus.NO_SQL and "line 2" in preds[1].error
    assert preds[2].pred_sql == "SELECT 'a\tb'\tother"                   # suffix != db_id: kept
    fp = ReplayGenerator("m", f).fingerprint()
    assert fp == ReplayGenerator("other name", f).fingerprint()
    assert fp != ReplayGenerator("m", f, strip_semicolon=False).fingerprint()
    f.write_text("SELECT 0\n\nSELECT 2\n")
    assert ReplayGenerator("m", f).fingerprint() != fp


def test_replay_jsonl(tmp_path):
    f = tmp_path / "p.jsonl"
    rows = [{"question_id": "q0", "pred_sql": "SELECT 0;"},
            {"question_id": "q1", "sql": "SELECT 1"},
            {"question_id": "q1", "predicted_sql": "SELECT 'pg'", "dialect": "postgres"},
            {"question_id": "q2", "pred_sql": None}]
    f.write_text("\n".join(json.dumps(r) for r in rows))
    ex = _examples(3)
    gen = make_generator({"name": "m", "generator": "replay", "predictions": str(f)})
    assert gen.format == "jsonl"
    sq = gen.generate(ex, "sqlite", "none")
    assert [p.pred_sql for p in sq] == ["SELECT 0", "SELECT 1", ""]
    assert sq[2].status is GenStatus.NO_SQL
    assert gen.generate(ex, "postgres", "none")[1].pred_sql == "SELECT 'pg'"   # dialect row wins
    with pytest.raises(ReplayError, match=r"answers 3 of 4 examples .*missing question_ids: \['q3'\]"):
        gen.generate(_examples(4), "sqlite", "none")
    partial = ReplayGenerator("m", f, allow_partial=True).generate(_examples(4), "sqlite", "none")
    assert partial[3].status is GenStatus.MISSING


def test_replay_jsonl_of_another_dataset_is_refused_even_with_allow_partial(tmp_path):
    """allow_partial scores a few unanswered questions as missing; a file whose question_ids
    match none of the dataset's is the wrong file (another dataset, split or id scheme): one
    line naming both id samples, not 0% with no warning."""
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join(json.dumps({"question_id": f"spider_dev_{i}", "pred_sql": "SELECT 1"}) for i in range(3)))
    gen = ReplayGenerator("m", f, allow_partial=True)
    with pytest.raises(ReplayError, match=r"answers none of the 3 examples: its question_ids "
                                          r"\(e\.g\. \['spider_dev_0'.*match none of the dataset's \(e\.g\. \['q0'"):
        gen.check(_examples(3), ["sqlite"])
    # a file answering only another dialect is still partial, not foreign
    f.write_text(json.dumps({"question_id": "q0", "pred_sql": "SELECT 1", "dialect": "postgres"}))
    assert ReplayGenerator("m", f, allow_partial=True).generate(_examples(2), "sqlite", "none")[0].status is GenStatus.MISSING


@pytest.mark.parametrize("line, pattern", [
    ('{"question_id": "q0"}', r"line 1: no predicted SQL: add one of pred_sql, sql, predicted_sql"),
    ('{"pred_sql": "SELECT 1"}', r"line 1: 'question_id' missing"),
    ('{"question_id": "q0", "pred_sql": 5}', r"line 1: 'pred_sql' must be a string or null"),
])
def test_replay_jsonl_malformed(tmp_path, line, pattern):
    f = tmp_path / "p.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(ReplayError, match=pattern):
        ReplayGenerator("m", f)
    f.write_text('{"question_id": "q0", "pred_sql": "x"}\n{"question_id": "q1", "pred_sql": \n')
    with pytest.raises(ReplayError, match=r"p\.jsonl, line 2: invalid JSON"):
        ReplayGenerator("m", f, format="jsonl")


@pytest.mark.parametrize("name", ["p.jsonl", "p.txt"])
def test_replay_broken_first_jsonl_line_is_reported_not_read_as_sql(tmp_path, name):
    """format auto: a JSONL file whose first line is broken was read as one SQL per line, every
    JSON line scored as SQL (EX 0, exit 0); it is JSONL by its name or its leading ``{``."""
    f = tmp_path / name
    f.write_text('{"question_id": "q0", "pred_sql": "SELECT 1"\n{"question_id": "q1", "pred_sql": "SELECT 2"}\n')
    with pytest.raises(ReplayError, match=r"line 1: invalid JSON"):
        ReplayGenerator("m", f)
    f.write_text("SELECT 1\n{not sql}\n")  # a lines file is still one by its first line
    if name.endswith(".txt"):
        assert ReplayGenerator("m", f).format == "lines"


def test_replay_duplicate_jsonl_row(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"question_id": "q0", "sql": "a"}\n{"question_id": "q0", "sql": "b"}\n')
    with pytest.raises(ReplayError, match=r"line 2: second prediction for question_id 'q0'"):
        ReplayGenerator("m", f).generate(_examples(1), "sqlite", "none")


def test_gold_generator(spider):
    gen = make_generator({"name": "gold", "generator": "gold"})
    assert isinstance(gen, GoldGenerator) and gen.fingerprint() == "gold-v1" and gen.model == "gold"
    preds = gen.generate(spider, "sqlite", "none")
    assert [p.pred_sql for p in preds] == [e.gold_sql.strip() for e in spider]
    assert all(p.status is GenStatus.OK for p in preds)


def test_registry_errors_and_pkg_paths(tmp_path):
    with pytest.raises(GeneratorConfigError, match=r"unknown generator 'vlm'; known generators: gold, hf, openai, replay, vllm"):
        make_generator({"name": "m", "generator": "vlm"})
    with pytest.raises(ReplayError, match=r"needs a prediction file: set model.predictions=PATH"):
        make_generator({"name": "m", "generator": "replay"})
    with pytest.raises(ReplayError, match=r"nothere\.sql for model 'm' does not exist"):
        make_generator({"name": "m", "generator": "replay", "predictions": str(tmp_path / "nothere.sql")})
    assert {"replay", "gold"} <= set(GENERATORS)
    gen = make_generator({"name": "rewritten", "generator": "replay",
                          "predictions": "pkg:polysql_ray.quickstart/data/rewritten.jsonl"})
    assert gen.n_predictions == 34


def test_a_file_longer_than_the_dataset_is_refused_even_when_partial(tmp_path):
    """allow_partial scores missing answers as 'missing'; extra lines mean the file is out of
    line with the dataset, which allow_partial must not hide. Blank lines at the end are fine."""
    f = tmp_path / "p.sql"
    f.write_text("SELECT 0\nSELECT 1\nSELECT 2\nSELECT 3\n")
    for partial in (False, True):
        with pytest.raises(ReplayError, match=r"has 4 lines but the dataset has 3 examples; .*line 4 on"):
            ReplayGenerator("m", f, allow_partial=partial).generate(_examples(3), "sqlite", "none")
    f.write_text("SELECT 0\nSELECT 1\nSELECT 2\n\n  \n")
    assert [p.pred_sql for p in ReplayGenerator("m", f).generate(_examples(3), "sqlite", "none")] == \
        ["SELECT 0", "SELECT 1", "SELECT 2"]


def test_replay_without_a_file_or_with_a_folder_says_what_to_set(tmp_path):
    with pytest.raises(ReplayError, match=r"needs a prediction file: set model.predictions=PATH"):
        ReplayGenerator.from_config({"name": "m", "generator": "replay", "predictions": "???"})
    with pytest.raises(ReplayError, match=r"is a folder, not a file"):
        ReplayGenerator("m", tmp_path)


def test_a_lines_file_out_of_line_is_caught_by_its_db_ids_and_a_short_one_is_announced(tmp_path, capsys):
    """A ``<SQL>\\t<db_id>`` line naming the database of another question means a line is
    missing or added above it (red team: a deleted line under allow_partial shifted every later
    answer, EX 47% instead of 97%, rc 0); a short file under allow_partial says on stderr how
    its lines are taken."""
    examples = _examples(2, "a") + [dataclasses.replace(e, question_id=f"q{e.position + 2}", position=e.position + 2,
                                                          extra={"dataset_size": 4}) for e in _examples(2, "b")]
    examples = [dataclasses.replace(e, extra={"dataset_size": 4}) for e in examples]
    f = tmp_path / "p.sql"
    f.write_text("SELECT 0\ta\nSELECT 2\tb\nSELECT 3\tb\n")  # line 2 (q1 on a) deleted
    for partial in (False, True):
        with pytest.raises(ReplayError, match=r"line 2 names database 'b' but example 'q1' is on 'a'"):
            ReplayGenerator("m", f, allow_partial=partial).generate(examples, "sqlite", "none")
    f.write_text("SELECT 0\ta\nSELECT 1\ta\nSELECT 2\tb\n")  # cut short: the last one is missing
    gen = ReplayGenerator("m", f, allow_partial=True)
    gen.check(examples, ["sqlite"])
    err = capsys.readouterr().err
    assert "has 3 lines for 4 examples" in err and "the last 1 are scored 'missing'" in err
    assert [p.status for p in gen.generate(examples, "sqlite", "none")] == [GenStatus.OK] * 3 + [GenStatus.MISSING]
    with pytest.raises(ReplayError, match=r"model.allow_partial=true scores the examples after line 3 as 'missing'"):
        ReplayGenerator("m", f).generate(examples, "sqlite", "none")


def test_format_lines_on_a_jsonl_file_is_refused(tmp_path):
    """model.format=lines on JSONL scored every answer as a JSON text, EX 0 with rc 0 (red team)."""
    f = tmp_path / "p.txt"
    f.write_text('{"question_id": "q0", "pred_sql": "SELECT 0"}\n')
    with pytest.raises(ReplayError, match=r"is JSONL .* but model.format=lines: set model.format=jsonl or auto"):
        ReplayGenerator("m", f, format="lines")
    assert ReplayGenerator("m", f).format == "jsonl"
