"""Dataset loaders: one module per layout, all yielding :class:`Example` records.

Entry points: :func:`load_dataset` and :func:`dataset_sources` (see ``registry``).
"""
from polysql_ray.datasets.base import DatasetConfig, DatasetError
from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.datasets.registry import LOADERS, dataset_sources, get_loader, load_dataset

__all__ = ["DatasetConfig", "DatasetError", "Example", "SourceDatabase", "LOADERS",
           "dataset_sources", "get_loader", "load_dataset"]
