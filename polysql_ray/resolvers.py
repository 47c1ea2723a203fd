"""The OmegaConf resolvers the configuration files use, registered on import.

Lives on the bottom floor so that every layer that resolves a config node (the datasets' loader
as much as ``polysql_ray.config``) has them, whatever was imported first.

* ``${repo_root:}``: the project checkout (so ``paths.shared`` defaults to the ``shared/`` folder
  beside it, whatever the working directory).
* ``${local_dir:X}``: ``X`` for a local folder; for an object-store URI (``s3://bucket/prefix``)
  a node-local folder for the files that must be local (embedded-engine replicas, the
  quickstart's databases): ``$POLYSQL_LOCAL_DIR/<scheme>/<bucket>/<prefix>`` (default
  ``~/.cache/polysql_ray/...``), the same path on every node.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from omegaconf import OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]


def local_dir(location: str) -> str:
    """``location`` itself when it is a local folder; for an object-store URI
    (``s3://bucket/prefix``) the node-local folder ``$POLYSQL_LOCAL_DIR/s3/bucket/prefix``
    (``POLYSQL_LOCAL_DIR`` defaults to ``~/.cache/polysql_ray``)."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", str(location))
    if not m or m.group(1).lower() == "file":
        return m.group(2) if m else str(location)
    base = os.environ.get("POLYSQL_LOCAL_DIR") or os.path.expanduser("~/.cache/polysql_ray")
    rest = "/".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", p) for p in m.group(2).split("?", 1)[0].split("/") if p)
    return os.path.join(base, m.group(1).lower(), rest)


if not OmegaConf.has_resolver("repo_root"):
    OmegaConf.register_new_resolver("repo_root", lambda: str(REPO_ROOT))
if not OmegaConf.has_resolver("local_dir"):
    OmegaConf.register_new_resolver("local_dir", local_dir)
