"""Run a sweep on an existing Ray cluster: ``RAY_ADDRESS=auto python -m jobs.sweep +sweep=NAME``.

Thin entry point: identical to ``python -m polysql_ray``; the driver joins the cluster named
by ``ray.address`` / ``RAY_ADDRESS`` (each RayJob in ``kubernetes/sweeps/`` submits exactly this).
"""
from polysql_ray.__main__ import main

if __name__ == "__main__":
    main()
