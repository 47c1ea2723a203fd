"""polysql_ray: dual-execution text-to-SQL evaluation across dialects (README).

Importing the package quiets one dependency logger in every process that imports it (the
driver and every Ray worker): sqlglot warns "Falling back to parsing as a 'Command'" and
"contains unsupported syntax" once per parse of a statement it cannot read, and the project
parses every predicted SQL several times (guard, structural check, shape), so one hostile or
unusual prediction printed the same warning 4 times. What sqlglot could not read is recorded
where it matters (the guard's refusal or the verdict's reason), so its warnings go no further
than ERROR.
"""
import logging as _logging

_logging.getLogger("sqlglot").setLevel(_logging.ERROR)
