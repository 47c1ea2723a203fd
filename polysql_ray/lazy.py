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
