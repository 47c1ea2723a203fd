"""Dataset loaders: real Spider dev, BIRD and JSONL fixtures, malformed input, configs."""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from polysql_ray.datasets import DatasetError, dataset_sources, load_dataset
from polysql_ray.datasets.registry import LOADERS

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POLYSQL_SHARED", REPO.parent / "shared"))
SPIDER = SHARED / "data" / "spider"


def _need_spider():
    if not (SPIDER / "dev.json").is_file():
        pytest.skip(f"shared Spider data not found at {SPIDER} (set POLYSQL_SHARED)")


def _sqlite(path: Path, ddl: str = "CREATE TABLE IF NOT EXISTS t (x INTEGER); INSERT INTO t VALUES (1);") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(ddl)
    con.close()


# ----------------------------------------------------------------------------- Spider


@pytest.fixture(scope="module")
def spider():
    _need_spider()
    return load_dataset({"name": "spider", "layout": "spider", "root": str(SPIDER)})


def test_spider_dev_counts_and_ids(spider):
    assert len(spider) == 1034
    assert [e.question_id for e in spider] == [str(i) for i in range(1034)]
    assert [e.position for e in spider] == list(range(1034))
    raw = json.loads((SPIDER / "dev.json").read_text())
    assert [e.gold_sql for e in spider] == [r["query"] for r in raw]
    assert all(e.gold_dialect == "sqlite" and e.source_engine == "sqlite" for e in spider)
    assert spider[0].question == "How many singers do we have?"
    assert spider[0].extra["dataset_size"] == 1034


def test_spider_missing_wta_1_is_a_gold_error_not_a_crash(spider):
    bad = [e for e in spider if e.gold_error]
    assert len(bad) == 62 and {e.db_id for e in bad} == {"wta_1"}
    expected = str((SPIDER / "database" / "wta_1" / "wta_1.sqlite").resolve())
    assert expected in bad[0].gold_error and "wta_1" in bad[0].gold_error
    assert not bad[0].database.exists
    good = [e for e in spider if not e.gold_error]
    assert all(Path(e.database.location).is_file() for e in good)


def test_spider_sources_and_filters():
    _need_spider()
    cfg = {"name": "spider", "layout": "spider", "root": str(SPIDER)}
    srcs = dataset_sources(cfg)
    assert len(srcs) == 20 and sum(not s.exists for s in srcs) == 1
    assert srcs[0].db_id == "concert_singer"
    sub = load_dataset({**cfg, "db_ids": ["pets_1", "wta_1"], "limit": 50})
    assert len(sub) == 50 and {e.db_id for e in sub} <= {"pets_1", "wta_1"}
    # filtered examples keep their dev.json position (prediction files align to it)
    assert sub[0].question_id == str(sub[0].position) and sub[0].position > 0
    assert {s.db_id for s in dataset_sources({**cfg, "db_ids": ["pets_1"]})} == {"pets_1"}


def test_spider_yaml_resolves_with_paths_shared():
    _need_spider()
    cfg = OmegaConf.merge(OmegaConf.create({"paths": {"shared": str(SHARED)}}),
                          {"dataset": OmegaConf.load(REPO / "conf" / "dataset" / "spider.yaml")})
    assert len(load_dataset(cfg.dataset)) == 1034


def test_quickstart_yaml_materializes_under_results_dir(tmp_path):
    cfg = OmegaConf.merge(OmegaConf.create({"results_dir": str(tmp_path)}),
                          {"dataset": OmegaConf.load(REPO / "conf" / "dataset" / "quickstart.yaml")})
    ex = load_dataset(cfg.dataset)
    assert len(ex) == 34 and all(e.database.exists for e in ex)
    assert (tmp_path / "quickstart_data" / "database" / "shop" / "shop.sqlite").is_file()
    assert [s.db_id for s in dataset_sources(cfg.dataset)] == ["shop", "school"]


def test_all_dataset_yamls_name_a_known_layout():
    files = sorted((REPO / "conf" / "dataset").glob("*.yaml"))
    assert {f.stem for f in files} >= {"spider", "bird", "jsonl", "quickstart"}
    for f in files:
        assert OmegaConf.load(f).layout in LOADERS, f
    with pytest.raises(DatasetError, match=r"cannot be resolved: .*root"):
        load_dataset(OmegaConf.load(REPO / "conf" / "dataset" / "jsonl.yaml"))


# ----------------------------------------------------------------------------- BIRD


def _bird(tmp_path: Path, records) -> dict:
    (tmp_path / "dev.json").write_text(json.dumps(records))
    _sqlite(tmp_path / "dev_databases" / "cali" / "cali.sqlite")
    return {"name": "bird", "layout": "bird", "root": str(tmp_path)}


BIRD_ROWS = [
    {"question_id": 1471, "db_id": "cali", "question": "How many?", "evidence": "x refers to t",
     "SQL": "SELECT count(*) FROM t", "difficulty": "simple"},
    {"question_id": 1472, "db_id": "gone", "question": "Other?", "evidence": "", "SQL": "SELECT 1",
     "difficulty": "moderate"},
]


def test_bird_layout(tmp_path):
    ex = load_dataset(_bird(tmp_path, BIRD_ROWS))
    assert [e.question_id for e in ex] == ["1471", "1472"]
    assert ex[0].evidence == "x refers to t" and ex[0].gold_sql == "SELECT count(*) FROM t"
    assert ex[0].extra["difficulty"] == "simple" and ex[0].database.exists and ex[0].gold_error is None
    assert "gone.sqlite" in ex[1].gold_error and not ex[1].database.exists


def test_bird_duplicate_id_and_missing_sql(tmp_path):
    with pytest.raises(DatasetError, match=r"question_id '1471' appears twice"):
        load_dataset(_bird(tmp_path, [BIRD_ROWS[0], BIRD_ROWS[0]]))
    rows = [dict(BIRD_ROWS[0]), {k: v for k, v in BIRD_ROWS[1].items() if k != "SQL"}]
    with pytest.raises(DatasetError, match=r"dev\.json, record 1 .*missing required key 'SQL'"):
        load_dataset(_bird(tmp_path, rows))


# ----------------------------------------------------------------------------- JSONL


def _jsonl(tmp_path: Path, lines: list[str], **cfg) -> dict:
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    return {"name": "mine", "layout": "jsonl", "root": str(tmp_path), "file": "q.jsonl", **cfg}


def test_jsonl_layout_db_root_db_path_and_defaults(tmp_path):
    _sqlite(tmp_path / "database" / "a" / "a.sqlite")
    _sqlite(tmp_path / "elsewhere" / "b.db")
    rows = [
        {"db_id": "a", "question": "q0", "gold_sql": "SELECT 1"},
        {"question_id": 7, "db_id": "b", "question": "q1", "query": "SELECT 2", "db_path": "elsewhere/b.db",
         "tags": ["x"]},
        {"question_id": "z", "db_id": "m", "question": "q2", "SQL": "SELECT 3", "gold_dialect": "mysql",
         "source_engine": "mysql", "evidence": "hint"},
    ]
    ex = load_dataset(_jsonl(tmp_path, [json.dumps(r) for r in rows] + [""]))
    assert [e.question_id for e in ex] == ["0", "7", "z"]
    assert [e.gold_sql for e in ex] == ["SELECT 1", "SELECT 2", "SELECT 3"]
    assert ex[0].database.exists and ex[0].database.location.endswith("database/a/a.sqlite")
    assert ex[1].database.exists and ex[1].database.location.endswith("elsewhere/b.db")
    assert ex[1].extra["tags"] == ["x"]
    assert (ex[2].gold_dialect, ex[2].source_engine, ex[2].database.location) == ("mysql", "mysql", "m")
    assert ex[2].evidence == "hint" and ex[2].gold_error is None


def test_jsonl_missing_db_file_is_gold_error(tmp_path):
    ex = load_dataset(_jsonl(tmp_path, [json.dumps({"db_id": "nope", "question": "q", "gold_sql": "SELECT 1"})]))
    assert "nope/nope.sqlite" in ex[0].gold_error


# ----------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize("lines, pattern", [
    (['{"db_id": "a", "question": "q", "gold_sql": "SELECT 1"}', '{"db_id": "a", "question": '],
     r"q\.jsonl, line 2: invalid JSON"),
    (['[1, 2]'], r"q\.jsonl, line 1: expected a JSON object, got list"),
    (['{"db_id": "a", "question": "q"}'], r"line 1: missing required key 'gold_sql' or 'query' or 'SQL'"),
    (['{"db_id": "a", "question": 5, "gold_sql": "SELECT 1"}'], r"line 1: 'question' must be a string, got int"),
    (['{"db_id": "", "question": "q", "gold_sql": "SELECT 1"}'], r"line 1: 'db_id' is empty"),
    (['', '  '], r"q\.jsonl is empty"),
    (['{"question_id": 1, "db_id": "a", "question": "q", "gold_sql": "x"}',
      '{"question_id": "1", "db_id": "a", "question": "r", "gold_sql": "y"}'], r"question_id '1' appears twice"),
])
def test_jsonl_malformed_messages(tmp_path, lines, pattern):
    with pytest.raises(DatasetError, match=pattern):
        load_dataset(_jsonl(tmp_path, lines))


def test_spider_style_malformed_files(tmp_path):
    cfg = {"name": "s", "layout": "spider", "root": str(tmp_path)}
    with pytest.raises(DatasetError, match=r"dev\.json does not exist"):
        load_dataset(cfg)
    (tmp_path / "dev.json").write_text("")
    with pytest.raises(DatasetError, match=r"dev\.json is empty"):
        load_dataset(cfg)
    (tmp_path / "dev.json").write_text('[\n {"db_id": "a",\n  "question": "q" "query": "x"}]')
    with pytest.raises(DatasetError, match=r"dev\.json: invalid JSON at line 3, column"):
        load_dataset(cfg)
    (tmp_path / "dev.json").write_text('{"db_id": "a"}')
    with pytest.raises(DatasetError, match=r"expected a JSON array"):
        load_dataset(cfg)
    (tmp_path / "dev.json").write_text('[{"db_id": "a", "question": "q", "query": "x"}, "oops"]')
    with pytest.raises(DatasetError, match=r"record 1 \(0-based\): expected a JSON object, got str"):
        load_dataset(cfg)
    (tmp_path / "dev.json").write_text('[{"db_id": "a", "question": "q", "query": ["x"]}]')
    with pytest.raises(DatasetError, match=r"record 0 .*'query' must be a string, got list"):
        load_dataset(cfg)


def test_config_errors(tmp_path):
    with pytest.raises(DatasetError, match=r"root folder .*does-not-exist does not exist"):
        load_dataset({"name": "s", "layout": "spider", "root": str(tmp_path / "does-not-exist")})
    with pytest.raises(DatasetError, match=r"has no 'root'"):
        load_dataset({"name": "s", "layout": "spider"})
    with pytest.raises(DatasetError, match=r"unknown dataset layout 'spyder'; known layouts: archer, bird, jsonl"):
        load_dataset({"name": "s", "layout": "spyder", "root": str(tmp_path)})
    with pytest.raises(DatasetError, match=r"has no 'layout'"):
        load_dataset({"name": "s"})
    for bad in ("ten", 0, -1, True):   # 0 selected nothing and still started Ray
        with pytest.raises(DatasetError, match=r"limit must be a positive integer or null"):
            load_dataset({"name": "s", "layout": "spider", "root": str(tmp_path), "limit": bad})
    (tmp_path / "dev.json").write_text('[{"db_id": "a", "question": "q", "query": "x"}]')
    with pytest.raises(DatasetError, match=r"db_ids \['b'\] match no question"):
        load_dataset({"name": "s", "layout": "spider", "root": str(tmp_path), "db_ids": ["b"]})
