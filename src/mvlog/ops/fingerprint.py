"""Row and key fingerprints that PostgreSQL and Spark compute alike, so a view can be compared
with its query without moving its rows (``mvlog verify``).

Every column is first written in a canonical text form that both engines produce for the same
value: chosen by the column's type in the Delta view (the type mvlog mapped PostgreSQL's to),
e.g. a ``timestamp`` (with time zone) as its microseconds since the epoch, a ``boolean`` as
``t``/``f``, a ``decimal`` without trailing zeros, a ``double`` in ``%.14e`` notation. A row's
text is its columns' texts, each prefixed with its length (NULL: ``~``), so no two rows share one;
its fingerprint is the md5 of that text, in hex. A view key's fingerprint is the same over its
key columns. Sums of the fingerprints' first 60 bits (as integers), with row counts, per bucket
(the first two hex digits of the key's fingerprint) compare a whole view in 256 numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from mvlog.errors import UsageError
from mvlog.spark.sparksql import quote_spark
from mvlog.sql.parse.sqltree import DIALECT, sql_text

KEY_HASH = "_mvlog_kh"
ROW_HASH = "_mvlog_rh"
BUCKET_DIGITS = 2  # 256 buckets
HASH_BITS_HEX = 15  # 60 bits of each row fingerprint are summed


@dataclass(frozen=True)
class Column:
    """A view column: its name and its Delta (Spark) type, as ``DataFrame.dtypes`` spells it."""

    name: str
    spark_type: str


def _kind(spark_type: str) -> str:
    if spark_type in ("tinyint", "smallint", "int", "bigint", "string"):
        return "text"
    if spark_type.startswith("decimal"):
        return "decimal"
    if spark_type in ("boolean", "date", "timestamp", "timestamp_ntz", "binary"):
        return spark_type
    if spark_type in ("double", "float"):
        return "float"
    if spark_type.startswith("array<") and not re.search(r"\b(double|float|timestamp|timestamp_ntz|date|binary|"
                                                          r"array|struct|map)\b", spark_type[6:-1]):
        return "array"
    raise UsageError(f"a column of type {spark_type} cannot be fingerprinted")


def decimal_scale(spark_type: str) -> int:
    """The scale of a Spark ``decimal(p,s)`` type (``decimal`` alone: Spark's default, 0)."""
    found = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", spark_type)
    return int(found.group(2)) if found else 0


def check_columns(columns: list[Column]) -> None:
    """Raise UsageError naming the first column whose type has no canonical text form."""
    for column in columns:
        try:
            _kind(column.spark_type)
        except UsageError:
            raise UsageError(f"column {column.name} has type {column.spark_type}, which verify cannot compare "
                             f"across PostgreSQL and Spark") from None


# -- Spark SQL ------------------------------------------------------------------------------

def spark_text(column: Column) -> str:
    """Spark SQL: the canonical text of ``column`` (NULL for NULL)."""
    c = quote_spark(column.name)
    kind = _kind(column.spark_type)
    if kind == "text":
        return f"CAST({c} AS STRING)"
    if kind == "decimal":  # without trailing zeros: a computed numeric is decimal(38,18) here
        s = f"CAST({c} AS STRING)"
        return (f"CASE WHEN instr({s}, '.') > 0 THEN regexp_replace(regexp_replace({s}, '0+$', ''), '[.]$', '') "
                f"ELSE {s} END")
    if kind == "boolean":
        return f"CASE WHEN {c} THEN 't' WHEN NOT {c} THEN 'f' END"
    if kind == "date":
        return f"date_format({c}, 'yyyy-MM-dd')"
    if kind == "timestamp_ntz":
        return f"date_format({c}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"
    if kind == "timestamp":
        return f"CAST(unix_micros({c}) AS STRING)"
    if kind == "binary":
        return f"lower(hex({c}))"
    if kind == "float":
        d = f"CAST({c} AS DOUBLE)"
        return (f"CASE WHEN {d} IS NULL THEN NULL WHEN isnan({d}) THEN 'NaN' "
                f"WHEN {d} = double('infinity') THEN 'Infinity' WHEN {d} = double('-infinity') THEN '-Infinity' "
                f"ELSE format_string('%.14e', {d}) END")
    return f"to_json({c})"  # array


def spark_fingerprint(columns: list[Column]) -> str:
    """Spark SQL: the fingerprint over ``columns`` (a row's: all of them; a key's: its columns)."""
    tokens = [f"coalesce(CAST(char_length({t}) AS STRING) || ':' || {t}, '~')" for t in map(spark_text, columns)]
    return f"md5({' || '.join(tokens) if tokens else repr('')})"


def spark_hashes(columns: list[Column], keys: list[Column]) -> list[str]:
    """Spark SQL select expressions: the key fingerprint (the row's, for a view without a key)
    and the row fingerprint, as ``_mvlog_kh`` and ``_mvlog_rh``."""
    row = spark_fingerprint(columns)
    return [f"{spark_fingerprint(keys) if keys else row} AS {KEY_HASH}", f"{row} AS {ROW_HASH}"]


def spark_bucket_sums(hashed: str) -> str:
    """Spark SQL over a relation of ``_mvlog_kh``, ``_mvlog_rh``: per bucket, count and sum."""
    return (f"SELECT substr({KEY_HASH}, 1, {BUCKET_DIGITS}) AS bucket, count(1) AS n, "
            f"CAST(sum(CAST(conv(substr({ROW_HASH}, 1, {HASH_BITS_HEX}), 16, 10) AS DECIMAL(20, 0))) AS STRING) AS s "
            f"FROM {hashed} GROUP BY 1")


# -- PostgreSQL ----------------------------------------------------------------------------

def _pg(sql: str) -> exp.Expression:
    return exp.maybe_parse(sql, dialect=DIALECT)


def pg_text(column: Column, alias: str = "v") -> exp.Expression:
    """PostgreSQL: the canonical text of ``column`` of the relation ``alias`` (NULL for NULL)."""
    c = exp.column(exp.to_identifier(column.name, quoted=True), table=exp.to_identifier(alias, quoted=True))
    c_sql = sql_text(c)
    kind = _kind(column.spark_type)
    if kind == "text":  # the type's output function, as JDBC reads it (char(n) keeps its padding)
        return _pg(f"CASE WHEN {c_sql} IS NOT NULL THEN concat({c_sql}) END")
    if kind == "decimal":
        # At the Delta column's scale, rounded half away from zero as the JDBC read rounds it (a
        # computed numeric with more fractional digits lands as decimal(38,18)).
        return _pg(f"trim_scale(round({c_sql}, {decimal_scale(column.spark_type)}))::text")
    if kind == "boolean":
        return _pg(f"CASE WHEN {c_sql} THEN 't' WHEN NOT {c_sql} THEN 'f' END")
    if kind == "date":
        return _pg(f"to_char({c_sql}, 'YYYY-MM-DD')")
    if kind == "timestamp_ntz":
        return _pg(f"to_char({c_sql}, 'YYYY-MM-DD HH24:MI:SS.US')")
    if kind == "timestamp":
        return _pg(f"(extract(epoch FROM {c_sql}) * 1000000)::bigint::text")
    if kind == "binary":
        return _pg(f"encode({c_sql}, 'hex')")
    if kind == "float":
        d = f"{c_sql}::float8"
        return _pg(f"CASE WHEN {d} = 'NaN'::float8 THEN 'NaN' WHEN {d} = 'Infinity'::float8 THEN 'Infinity' "
                   f"WHEN {d} = '-Infinity'::float8 THEN '-Infinity' "
                   f"ELSE ltrim(to_char({d}, '9.99999999999999EEEE')) END")
    return _pg(f"array_to_json({c_sql})::text")


def pg_fingerprint(columns: list[Column], alias: str = "v") -> exp.Expression:
    """PostgreSQL: the fingerprint over ``columns`` of the relation ``alias``."""
    tokens = []
    for column in columns:
        text = sql_text(pg_text(column, alias))
        tokens.append(f"coalesce(char_length({text})::text || ':' || {text}, '~')")
    return _pg(f"md5({' || '.join(tokens) if tokens else repr('')})")


def pg_hashes(select_sql: str, columns: list[Column], keys: list[Column]) -> exp.Select:
    """``SELECT <key fingerprint> AS _mvlog_kh, <row fingerprint> AS _mvlog_rh FROM (<select_sql>) v``."""
    row = pg_fingerprint(columns)
    key = pg_fingerprint(keys) if keys else row.copy()
    return exp.select(exp.alias_(key, KEY_HASH), exp.alias_(row, ROW_HASH)).from_(_view_rows(select_sql))


def pg_bucket_sums(hashed: exp.Select) -> exp.Select:
    """Per bucket of ``hashed`` (rows of ``_mvlog_kh``, ``_mvlog_rh``: see :func:`pg_hashes`), count
    and sum (as text, to compare with Spark's)."""
    bits = HASH_BITS_HEX * 4
    sums = _pg(f'SELECT substr("{KEY_HASH}", 1, {BUCKET_DIGITS}) AS bucket, count(*) AS n, '
               f'sum((\'x\' || substr("{ROW_HASH}", 1, {HASH_BITS_HEX}))::bit({bits})::bigint)::text AS s '
               f'FROM hashed GROUP BY 1')
    assert isinstance(sums, exp.Select)
    return sums.from_(subquery(hashed, "h"), copy=False)


def _view_rows(select_sql: str) -> exp.Subquery:
    """``(<select_sql>) AS "v"``: the view's query, whose columns the fingerprints read."""
    return subquery(exp.maybe_parse(select_sql, dialect=DIALECT), "v")


def subquery(query: exp.Expression, alias: str) -> exp.Subquery:
    """``(query) AS alias``."""
    return exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))


def pg_texts(select_sql: str, columns: list[Column], keys: list[Column]) -> exp.Select:
    """``SELECT <key fingerprint> AS _mvlog_kh, <canonical text of each column> FROM (<select_sql>) v``."""
    key = pg_fingerprint(keys or columns)
    texts = [exp.alias_(pg_text(c), exp.to_identifier(c.name, quoted=True)) for c in columns]
    return exp.select(exp.alias_(key, KEY_HASH), *texts).from_(_view_rows(select_sql))


def spark_texts(columns: list[Column], keys: list[Column]) -> list[str]:
    """Spark SQL select expressions: the key fingerprint and each column's canonical text."""
    return [f"{spark_fingerprint(keys or columns)} AS {KEY_HASH}",
            *[f"{spark_text(c)} AS {quote_spark(c.name)}" for c in columns]]
