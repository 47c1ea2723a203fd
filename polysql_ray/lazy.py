"""Package names imported on first use (PEP 562), for packages whose submodules are heavy.

A package ``__init__`` declares which names each submodule exports and binds what
:func:`lazy_exports` returns::

    __all__, __getattr__, __dir__ = lazy_exports(__name__, globals(), {"ex": ("ex_table",)})

``from package import ex_table`` then imports ``package.ex`` only at that moment, so importing
one light submodule (the run's EX table) does not load the others' dependencies (statsmodels,
SciPy, matplotlib).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence


def lazy_exports(package: str, namespace: MutableMapping, exports: Mapping[str, Sequence[str]]
                 ) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` whose submodule ``m`` exports the
    names ``exports[m]``. A resolved name is stored in ``namespace`` (the package's globals), so
    each is imported once. Errors: ``AttributeError`` for a name no submodule exports."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return sorted(module_of), __getattr__, __dir__


class _HidePandas:
    """A ``sys.meta_path`` finder that makes ``import pandas`` fail while it is installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden from pyarrow's look)", name=name)
        return None


_ARROW_LOOKED = False


def arrow_without_pandas() -> None:
    """Answer pyarrow's one look for pandas with "not installed", in a process of our own.

    pyarrow checks, on its first conversion of Python values in a process (``pa.array``,
    ``Table.from_pylist``, a compute call with a Python scalar), whether pandas is importable,
    to recognise pandas inputs; where pandas is installed (``ray[data]`` brings it) that check
    imports it: about 41 MiB of resident memory and 0.3-0.5 s of CPU in *every* process of a run
    that touches Arrow (driver, scoring worker, execution actor, SQLite child), for values that
    are never pandas objects (no module here hands pyarrow pandas data). Here the check runs once
    with ``import pandas`` failing, so pyarrow records "no pandas" for its input checks;
    pyarrow still imports pandas when asked for it explicitly (``Table.to_pandas()``), and other
    libraries import it as usual. Idempotent; never raises (if pyarrow changes, pandas is simply
    imported as before). Call it only in processes the run owns (the CLI driver, its Ray workers,
    the engine child), never in a library call inside a user's process, where pandas inputs to
    pyarrow are legitimate."""
    global _ARROW_LOOKED
    if _ARROW_LOOKED:
        return
    _ARROW_LOOKED = True
    import sys

    if "pandas" in sys.modules:  # already imported by someone: nothing to save
        return
    hide = _HidePandas()
    sys.meta_path.insert(0, hide)
    try:
        import pyarrow as pa

        pa.array([0])
    except Exception:  # noqa: BLE001 - an optimisation only; the run goes on either way
        pass
    finally:
        sys.meta_path.remove(hide)
