"""Benchmark results: the result-record schema (:mod:`leaderboard.records`), the papers' reported
numbers (:mod:`leaderboard.reported`), the statistics for few seeds (:mod:`leaderboard.inference`,
:mod:`leaderboard.stats`), what the records say of their comparability (:mod:`leaderboard.audit`), and
the tables and plots built from a results directory (:mod:`leaderboard.aggregate`,
:mod:`leaderboard.render`, :mod:`leaderboard.curves`, :mod:`leaderboard.plots`)."""

from leaderboard.records import (
    SCHEMA_VERSION,
    RecordError,
    RecordProblem,
    ResultRecord,
    SchemaVersionError,
    cell_name,
    read_records,
    record_exists,
    write_record,
)

__all__ = [
    "SCHEMA_VERSION",
    "RecordError",
    "RecordProblem",
    "ResultRecord",
    "SchemaVersionError",
    "cell_name",
    "read_records",
    "record_exists",
    "write_record",
]
