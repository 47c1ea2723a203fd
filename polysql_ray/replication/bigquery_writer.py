"""BigQuery target writer: one dataset ``pq_<dataset>_<db_id>`` per copy, loaded from Arrow.

The dataset is recreated (``delete_contents``), each table created with the exact source names
(BigQuery keeps names; tables resolve case-sensitively, columns case-insensitively) and the
types of ``typemap.TARGET_TYPES["bigquery"]`` (INT64, FLOAT64, STRING, BYTES, NUMERIC/BIGNUMERIC,
BOOL, DATE, DATETIME), mode REQUIRED where the source declares NOT NULL and holds no NULL,
then loaded by a load job from the reader's Arrow batches written as Parquet (BigQuery docs
"Loading Parquet data"). PRIMARY/FOREIGN KEY are recorded as dropped (BigQuery keys are
unenforced). Fingerprint: ``replication.postgres.content_fingerprint`` over the tables'
schemas and rows, recomputed at each reuse.
"""
from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import bigquery as bq
from polysql_ray.replication import typemap
from polysql_ray.replication.base import ReplicationError, TableChecksum, TableSpec
from polysql_ray.replication.certificate import ChecksumAccumulator
from polysql_ray.replication.postgres import content_fingerprint


def qb(name: str) -> str:
    """Backquote a GoogleSQL identifier."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


class BigQueryWriter:
    """:class:`~polysql_ray.replication.base.TargetWriter` for BigQuery."""

    engine = "bigquery"

    def __init__(self, settings: dict | None = None) -> None:
        self.settings = {**bq.DEFAULTS, **(settings or {})}
        self._client = None

    @property
    def client(self):
        """The BigQuery client used to create and load the replica datasets, made on first use."""
        if self._client is None:
            self._client = bq.make_client(self.settings)
        return self._client

    def version(self) -> str:
        """``bigquery v2 @ <endpoint>`` (the service has no version; the endpoint tells an
        emulator from Google)."""
        return f"bigquery v2 @ {self.settings.get('api_endpoint') or 'bigquery.googleapis.com'}"

    def location_for(self, dataset: str, db_id: str, replicas_dir: Path, tag: str = "",
                     schema: str = "") -> str:
        """Dataset id ``pq_<dataset>_<db_id>_<tag>``."""
        return bq.dataset_name(dataset, db_id, tag)

    def _ref(self, location: str, table: str | None = None) -> str:
        return f"{self.client.project}.{location}" + (f".{table}" if table else "")

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase, reader) -> list[str]:
        """Create and load the dataset; returns dropped-constraint sentences."""
        from polysql_ray.extras import require

        bigquery = require("google.cloud.bigquery", "the bigquery engine")
        from google.api_core import exceptions as gexc  # installed with google-cloud-bigquery

        dropped: list[str] = []
        try:
            self.drop(location)
            ds = bigquery.Dataset(self._ref(location))
            ds.location = self.settings.get("location")
            self.client.create_dataset(ds)
            for t in tables:
                batches = list(reader.batches(source, t))
                data = pa.Table.from_batches(batches, schema=t.arrow_schema())
                data = data.rename_columns([c.stored for c in t.columns])
                schema = []
                for c, col in zip(t.columns, data.columns):
                    c.target_type = typemap.target_type(self.engine, c)
                    required = c.not_null and col.null_count == 0
                    if c.not_null and not required:
                        dropped.append(f"NOT NULL {t.name}.{c.name}: source holds NULLs")
                    schema.append(bigquery.SchemaField(c.stored, c.target_type.split("(")[0],
                                                       mode="REQUIRED" if required else "NULLABLE"))
                if t.primary_key:
                    dropped.append(f"PRIMARY KEY {t.name}({', '.join(t.primary_key)}): BigQuery keys are not enforced")
                for fk in t.foreign_keys:
                    dropped.append(f"FOREIGN KEY {t.name}({', '.join(fk.columns)}) REFERENCES {fk.ref_table}: "
                                   f"BigQuery keys are not enforced")
                self.client.create_table(bigquery.Table(self._ref(location, t.stored), schema=schema))
                if data.num_rows:
                    buf = io.BytesIO()
                    pq.write_table(data, buf)
                    buf.seek(0)
                    self.client.load_table_from_file(
                        buf, self._ref(location, t.stored), job_config=bigquery.LoadJobConfig(
                            source_format="PARQUET", schema=schema,
                            write_disposition="WRITE_TRUNCATE")).result()
        except gexc.GoogleAPICallError as e:
            raise ReplicationError(f"bigquery copy {location}: {e}") from e
        return dropped

    def _arrow(self, location: str, table: str, columns: list[str]) -> pa.Table:
        sql = f"SELECT {', '.join(qb(c) for c in columns)} FROM {qb(self._ref(location, table))}"
        return self.client.query(sql).result().to_arrow(create_bqstorage_client=False)

    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B from the Python values BigQuery returns (via Arrow)."""
        out = {}
        for t in tables:
            data = self._arrow(location, t.stored, [c.stored for c in t.columns])
            acc = ChecksumAccumulator(t)
            acc.add_rows([tuple(r.values()) for r in data.to_pylist()])
            out[t.name] = acc.result()
        return out

    def fingerprint(self, location: str) -> str:
        """Content fingerprint of the dataset ("" when absent)."""
        from google.api_core import exceptions as gexc

        try:
            cols = [(t.table_id, f.name, f.field_type)
                    for t in sorted(self.client.list_tables(self._ref(location)), key=lambda x: x.table_id)
                    for f in self.client.get_table(t.reference).schema]
        except gexc.NotFound:
            return ""

        def rows(t: str, cs: list[str]):
            return [tuple(r.values()) for r in self._arrow(location, t, cs).to_pylist()]

        return content_fingerprint(cols, rows)

    def drop(self, location: str) -> None:
        """Delete the dataset and its tables (no error when absent)."""
        self.client.delete_dataset(self._ref(location), delete_contents=True, not_found_ok=True)
