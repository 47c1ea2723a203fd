"""Optional dependencies: which extra of ``pyproject.toml`` installs which module (the one place
this is decided), and the one line a run prints when a part it needs is not installed.

Every import of an optional module goes through :func:`require`, so a missing module reads the
same wherever it is met; a run checks everything it will need first (:func:`check_installed`,
called by the driver before any work), so ``dialects=[clickhouse]`` without the extra stops with
one line naming the extra, once, instead of one failure per database.

The results store needs no extra: its object-store path (``s3://``) is ``pyarrow.fs``, a core
dependency. The ``openai`` generator (and the judge when it is an OpenAI-compatible endpoint)
needs the ``openai`` SDK, extra ``openai``.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

#: Optional module -> the extra that installs it (``pip install 'polysql_ray[EXTRA]'``).
EXTRA_OF: dict[str, str] = {
    "chdb": "clickhouse",
    "clickhouse_connect": "clickhouse",
    "snowflake.connector": "snowflake",
    "google.cloud.bigquery": "bigquery",
    "transformers": "hf",
    "torch": "hf",
    "vllm": "gpu",
    "openai": "openai",
}

#: What each optional part of a run imports: (kind, name) -> modules. ``engine clickhouse+host``
#: is the ClickHouse server path (``engines.clickhouse.host`` set) instead of in-process chdb.
NEEDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("engine", "clickhouse"): ("chdb",),
    ("engine", "clickhouse+host"): ("clickhouse_connect",),
    ("engine", "snowflake"): ("snowflake.connector",),
    ("engine", "bigquery"): ("google.cloud.bigquery",),
    ("generator", "hf"): ("transformers", "torch"),
    ("generator", "vllm"): ("vllm",),
    ("generator", "openai"): ("openai",),
}


class MissingExtra(ImportError):
    """An optional module is not installed; the message names the extra that installs it."""


def install_line(missing: dict[str, str]) -> str:
    """One line for ``{module: who needs it}``: the extras to install, then who needs what."""
    extras = sorted({EXTRA_OF[m] for m in missing})
    who = "; ".join(f"{need} needs {m}" for m, need in missing.items())
    return (f"{who}: install the missing extra{'s' if len(extras) > 1 else ''} with "
            f"pip install 'polysql_ray[{','.join(extras)}]'")


def installed(module: str) -> bool:
    """Whether ``module`` (dotted) can be imported, without importing it (torch takes seconds).
    A module set to ``None`` in ``sys.modules`` (blocked) counts as missing."""
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name in sys.modules and sys.modules[name] is None:
            return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return module in sys.modules


def require(module: str, needed_by: str | None = None) -> ModuleType:
    """``importlib.import_module(module)`` for a module of :data:`EXTRA_OF`; a missing one
    raises :class:`MissingExtra` with :func:`install_line`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(install_line({module: needed_by or f"polysql_ray ({exc})"})) from exc


def engine_part(engine: str, settings: dict | None) -> tuple[str, str]:
    """The :data:`NEEDS` key of target engine ``engine`` with its ``engines.<engine>`` settings
    (``clickhouse+host`` when a ClickHouse server is configured)."""
    if (settings or {}).get("host") and ("engine", f"{engine}+host") in NEEDS:
        return ("engine", f"{engine}+host")
    return ("engine", engine)


def check_installed(parts: dict[tuple[str, str], str]) -> None:
    """Raise :class:`MissingExtra` (one line) if any module needed by ``parts`` is missing.

    Args:
        parts: ``{(kind, name): how the config asks for it}`` for the run's engines and
            generators, e.g. ``{("engine", "clickhouse"): "dialects=[clickhouse]"}``; parts
            absent from :data:`NEEDS` need nothing optional.
    """
    missing: dict[str, str] = {}
    for (kind, name), asked in parts.items():
        for module in NEEDS.get((kind, name), ()):
            if not installed(module):
                missing.setdefault(module, f"the {name.split('+')[0]} {kind} ({asked})")
    if missing:
        raise MissingExtra(install_line(missing))
