"""Planning ahead while the cluster starts (pipeline.planner.PlanAhead): what the driver plans
after the thread analyzed the first batches is what it plans without it, every batch reaches
the driver once and in order, and the default sweep (replay only) uses it."""
from __future__ import annotations

from polysql_ray.config import compose
from polysql_ray.pipeline.driver import ALL, build_grid, pending_of, score_keys
from polysql_ray.pipeline.generate import GenerationFeed, GenerationStage
from polysql_ray.pipeline.planner import PlanAhead, Planner


def _grid(tmp_path):
    cfg, loader, _ = compose([f"results_dir={tmp_path / 'results'}"])
    return build_grid(cfg, loader)


def _planned(grid, planner, feed, cells):
    out = []
    for cell in cells:
        indices, preds, last = feed.take(cell, timeout=0)
        assert last
        items, requests = planner.plan(cell, indices, score_keys(grid, cell), dict(zip(indices, preds)))
        out.append(([(it.key, it.gold, it.probe, it.ties_probe, it.pred, it.pred_probe, it.pred_ties_probe,
                      it.shape, it.pred_shape) for it in items], requests))
    return out


def _locations(grid):
    """Where each replica would be (plan() names a replica by its location; none is made)."""
    return {(c.dataset, src.db_id, c.target_engine): f"replica-of-{src.db_id}-in-{c.target_engine}"
            for c in grid.cells for src in grid.sources[c.dataset] if src.engine != c.target_engine}


def test_items_planned_after_the_analysis_ahead_are_those_planned_without_it(tmp_path):
    plain, ahead_grid = _grid(tmp_path), _grid(tmp_path)  # two grids: caches not shared
    assert ahead_grid.cells and not any(getattr(g, "uses_prompts", False) for g in ahead_grid.generators.values())
    pending = {c.key: ALL for c in ahead_grid.cells}
    planner = Planner(ahead_grid, {}, set())
    feed = GenerationFeed(GenerationStage(None), ahead_grid.generators, ahead_grid.datasets, ahead_grid.cells,
                          pending=pending)
    with PlanAhead(feed, planner, ahead_grid.cells, lambda c: pending_of(pending, c)) as ahead:
        ahead.join()  # the "cluster start" lasts until the thread is done
    total = sum(len(ahead_grid.datasets[c.dataset]) for c in ahead_grid.cells)
    assert ahead.analyzed == total and planner._pred_shapes  # every item analyzed, the caches filled
    planner.locate(_locations(ahead_grid))
    reference = Planner(plain, _locations(plain), set())
    plain_feed = GenerationFeed(GenerationStage(None), plain.generators, plain.datasets, plain.cells,
                                pending={c.key: ALL for c in plain.cells})
    cached = (len(planner._pred_shapes), len(ahead_grid.shapes))
    got, want = _planned(ahead_grid, planner, ahead, ahead_grid.cells), _planned(plain, reference, plain_feed,
                                                                               plain.cells)
    assert got == want
    assert (len(planner._pred_shapes), len(ahead_grid.shapes)) == cached  # planning analyzed nothing anew
    assert any(it[4] is not None for items, _ in got for it in items)  # predictions were planned


def test_a_thread_stopped_at_once_hands_every_batch_over_once(tmp_path):
    """Stopped whenever the cluster is up (here at once): each cell's batch is held or still in
    the feed, never lost or doubled; what was not analyzed ahead is analyzed when planned."""
    grid = _grid(tmp_path)
    pending = {c.key: ALL for c in grid.cells}
    feed = GenerationFeed(GenerationStage(None), grid.generators, grid.datasets, grid.cells, pending=pending)
    with PlanAhead(feed, Planner(grid, {}, set()), grid.cells, lambda c: pending_of(pending, c)) as ahead:
        pass
    for cell in grid.cells:
        indices, preds, last = ahead.take(cell, timeout=0)
        assert last and sorted(indices) == list(range(len(grid.datasets[cell.dataset])))
        assert [p.pred_sql for p in preds] == [p.pred_sql for p in feed.take(cell, timeout=0)[1]]
    assert 0 <= ahead.analyzed <= sum(len(grid.datasets[c.dataset]) for c in grid.cells)


def test_only_pending_questions_are_analyzed(tmp_path):
    grid = _grid(tmp_path)
    pending = {c.key: ([0, 2] if i == 0 else []) for i, c in enumerate(grid.cells)}
    feed = GenerationFeed(GenerationStage(None), grid.generators, grid.datasets, grid.cells, pending=pending)
    with PlanAhead(feed, Planner(grid, {}, set()), grid.cells, lambda c: pending_of(pending, c)) as ahead:
        ahead.join()
    assert ahead.analyzed == 2


def test_it_takes_no_batch_past_the_driver_window(tmp_path):
    """A cluster that is slow to start never has the thread read the whole sweep in: once it
    holds ``limit`` predictions it takes no more (the rest stay in the feed, in order)."""
    grid = _grid(tmp_path)
    assert len(grid.cells) >= 2
    pending = {c.key: ALL for c in grid.cells}
    feed = GenerationFeed(GenerationStage(None), grid.generators, grid.datasets, grid.cells, pending=pending)
    first = len(grid.datasets[grid.cells[0].dataset])
    with PlanAhead(feed, Planner(grid, {}, set()), grid.cells, lambda c: pending_of(pending, c), limit=1) as ahead:
        ahead.join()
    assert ahead.held == first and ahead.analyzed == first  # the first cell's batch, nothing after
    for cell in grid.cells:  # every cell still reaches the driver once
        assert ahead.take(cell, timeout=0)[2]


def test_the_thread_switch_interval_is_short_inside_the_block_and_restored_after(tmp_path):
    """ray.init's system calls wait at most a short switch interval for the parsing thread."""
    import sys

    from polysql_ray.pipeline.planner import SWITCH_INTERVAL_S

    grid = _grid(tmp_path)
    pending = {c.key: ALL for c in grid.cells}
    feed = GenerationFeed(GenerationStage(None), grid.generators, grid.datasets, grid.cells, pending=pending)
    before = sys.getswitchinterval()
    with PlanAhead(feed, Planner(grid, {}, set()), grid.cells, lambda c: pending_of(pending, c)):
        inside = sys.getswitchinterval()
    assert inside == min(before, SWITCH_INTERVAL_S) < before and sys.getswitchinterval() == before
