"""Snapshot manifest: what a leaderboard was computed from (store hash, versions, git SHA)."""
from __future__ import annotations

import hashlib
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from polysql_ray.statistics.load import store_files, store_location

#: Distributions whose versions are recorded.
PACKAGES = ("polysql_ray", "duckdb", "pyarrow", "numpy", "scipy", "statsmodels", "matplotlib",
            "sqlglot", "ray", "rich")


def store_sha256(results_dir: str | Path) -> str:
    """sha256 over the store's Parquet files in sorted order of their names.

    For each file: its path relative to ``<results_dir>/scores`` (POSIX; ``../unavailable/...``
    for pending rows), a NUL byte, its size in decimal, a NUL byte, then its bytes. Independent
    of where the store is mounted (a local folder or ``s3://bucket/prefix``).

    Raises:
        FileNotFoundError: no Parquet file in the store.
    """
    from polysql_ray.store.parquet import read_bytes

    loc = store_location(results_dir)
    base = loc.base.rstrip("/") + "/"

    def relative(f: str) -> str:
        r = f[len(base):]
        return r[len("scores/"):] if r.startswith("scores/") else "../" + r

    h = hashlib.sha256()
    for rel, f in sorted((relative(str(f)), str(f)) for f in store_files(results_dir)):
        data = read_bytes(loc, f)
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    return h.hexdigest()


def package_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when not installed)."""
    out: dict[str, str | None] = {}
    for p in packages:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def git_sha(path: str | Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of the repository holding ``path`` (this package by default).

    Read-only. None when git is missing, the folder is no repository or has no commit yet.
    Appends ``-dirty`` when tracked files have uncommitted changes.
    """
    cwd = Path(path) if path else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=cwd, capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def build_manifest(results_dir: str | Path, store_hash: str, policy_versions: list[str],
                   outputs: dict[str, Path], extra: dict | None = None) -> dict:
    """The ``manifest.json`` document.

    Args:
        store_hash: :func:`store_sha256` of the store.
        policy_versions: comparison policy versions present in the (deduplicated) store.
        outputs: output name -> file; each gets its sha256.
        extra: more fields (config, load summary).
    """
    return {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "results_dir": store_location(results_dir).uri,
        "store_sha256": store_hash,
        "store_files": len(store_files(results_dir)),
        "policy_versions": sorted(policy_versions),
        "git_sha": git_sha(),
        "packages": package_versions(),
        "outputs": {name: {"file": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
                    for name, p in sorted(outputs.items())},
        **(extra or {}),
    }
