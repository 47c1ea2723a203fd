"""Embedded replicas on a node that lacks them: the execution actor rebuilds the copy from the
source (certificate-verified) before running SQL on it, and says UNAVAILABLE when it cannot.

A node "without the file" is simulated on this machine by building the replica under one
``replication.dir`` (the driver's node) and then removing it, exactly what a fresh node sees:
the planned location, no file, no manifest. No Ray is needed: the actor class runs in-process.
"""
from __future__ import annotations

import dataclasses
import os
import shutil

from polysql_ray.datasets.registry import load_dataset
from polysql_ray.engines.base import ExecStatus
from polysql_ray.pipeline.actors import ExecutionActor
from polysql_ray.replication.pernode import Recipe, is_ready, replicate_locked

SQL = "SELECT count(*) AS n, sum(gpa) AS g, max(grade_level) AS top FROM students"


def _source(tmp_path, db_id: str = "school"):
    examples = load_dataset({"name": "quickstart", "layout": "quickstart", "root": str(tmp_path / "qs"),
                             "split": "dev", "source_engine": "sqlite", "gold_dialect": "sqlite"})
    return next(e.database for e in examples if e.db_id == db_id)


def test_a_node_without_the_replica_rebuilds_it_and_gets_the_same_rows(tmp_path):
    src = _source(tmp_path)
    recipe = Recipe(src, "duckdb", str(tmp_path / "replicas"), "declared")
    built = replicate_locked(recipe)                      # the driver's replication task, one node
    location = built.location
    first = ExecutionActor("duckdb", {}, {})
    expected = first.execute_one(location, SQL)
    assert expected.status is ExecStatus.OK and expected.table.to_pylist()[0]["n"] > 0
    first.engine.close()  # another node is another process: nothing of this one stays open

    shutil.rmtree(os.path.dirname(location))              # another node: neither file nor manifest
    assert not is_ready(location)
    actor = ExecutionActor("duckdb", {"_replica_recipes": {location: recipe}}, {})
    got = actor.execute_one(location, SQL)
    assert got.status is ExecStatus.OK and got.table.to_pylist() == expected.table.to_pylist()
    assert is_ready(location)                             # rebuilt, verified, manifest written

    actor.engine.close()
    bare = ExecutionActor("duckdb", {}, {})               # without a recipe: unavailable, no verdict
    shutil.rmtree(os.path.dirname(location))
    assert bare.execute_one(location, SQL).status is ExecStatus.UNAVAILABLE


def test_a_node_without_the_source_reports_unavailable(tmp_path):
    src = _source(tmp_path)
    recipe = Recipe(src, "duckdb", str(tmp_path / "replicas"), "declared")
    location = replicate_locked(recipe).location
    shutil.rmtree(os.path.dirname(location))
    gone = dataclasses.replace(src, location=str(tmp_path / "not-on-this-node.sqlite"))
    actor = ExecutionActor("duckdb", {"_replica_recipes": {location: dataclasses.replace(recipe, source=gone)}}, {})
    res = actor.execute_one(location, SQL)
    assert res.status is ExecStatus.UNAVAILABLE
    assert "rebuilding it failed" in (res.error or "") and "is missing" in (res.error or "")
    assert not os.path.exists(location)
    # a batch (one round trip to the engine child for the statements that can run): the same
    # answer for the missing replica, and the statement beside it still runs
    here = replicate_locked(Recipe(src, "duckdb", str(tmp_path / "here"), "declared")).location
    batch = ExecutionActor("duckdb", {"_replica_recipes": {location: dataclasses.replace(recipe, source=gone)}}, {})
    missing, fine, stats = batch.execute_batch([(location, SQL), (here, SQL)])
    assert (missing.status, missing.error) == (res.status, res.error)
    assert fine.status is ExecStatus.OK and fine.table.to_pylist()[0]["n"] > 0, (fine.status, fine.error)
    assert stats["n"] == 2
    batch.engine.close()
