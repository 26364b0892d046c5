"""Spark SQL as text: quoted names, literals, and the one line of a Spark error worth showing.

mvlog speaks to Delta through Spark SQL only (the same statements run on a session of its
own and over Spark Connect); these build that text safely and read Spark's errors back.
"""

from __future__ import annotations

import re
from typing import Any

# What the PostgreSQL JDBC driver says, inside a Spark error, when the connection, not the
# statement, failed: the same read may succeed later.
# What PostgreSQL's JDBC driver says when the server went away; and a refresh's exported snapshot
# is "invalid" only once the session that held it is gone (mvlog holds it for the whole refresh).
JDBC_CONNECTION_LOST = ("terminating connection", "I/O error occurred", "Connection refused",
                        "This connection has been closed", "server closed the connection",
                        "the database system is", "invalid snapshot identifier",
                        "FAILED_JDBC.CONNECTION")


def quote_spark(name: str) -> str:
    """A Spark SQL identifier in backticks."""
    return "`" + name.replace("`", "``") + "`"


def row_hash_sql(columns: list[str]) -> str:
    """Spark SQL: a 64-bit hash of a row's ``columns`` (in name order, so the order a query lists
    them in does not matter), NULL-aware: Spark's hashes skip NULLs, so which columns are NULL
    is hashed too — (NULL, 1) and (1, NULL) differ."""
    names = sorted(columns)
    nulls = [f"isnull({quote_spark(c)})" for c in names]
    return f"xxhash64({', '.join([*nulls, *map(quote_spark, names)]) or 'true'})"


def types_of(schema: Any) -> dict[str, str]:
    """Each column of a Spark schema (a StructType) and its type, as Spark SQL spells it."""
    return {f.name: f.dataType.simpleString() for f in schema.fields}


def delta_table(location: str) -> str:
    """The Delta table at ``location`` as Spark SQL names it: delta.`<path>`."""
    return f"delta.{quote_spark(location)}"


def spark_literal(value: Any) -> str:
    """``value`` (an int, Decimal, str or date read back from Spark) as a Spark SQL literal.

    Delta's MERGE does not take SQL parameters, and its file skipping needs literals."""
    import datetime
    from decimal import Decimal

    from sqlglot import exp

    if isinstance(value, bool):
        raise TypeError("booleans have no range literal")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal) and value.is_finite():
        return format(value, "f")
    if isinstance(value, str):
        return exp.Literal.string(value).sql("spark")
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return f"DATE '{value.isoformat()}'"
    raise TypeError(f"no Spark literal for {type(value).__name__}")


def _error_text(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)  # py4j.protocol.Py4JJavaError
    if java is not None:
        try:
            return str(java.toString())
        except Exception:
            return str(exc)
    return getattr(exc, "desc", None) or str(exc)


def postgres_message(exc: BaseException) -> str | None:
    """PostgreSQL's own message inside a Spark error from a JDBC read (``ERROR: …``), if any: it
    says what is wrong, where Spark's first line only names its error class and quotes the query."""
    found = re.search(r"\b(ERROR|FATAL): ([^\n]+?)(?:\. The error occurred [^\n]*)?$", _error_text(exc), re.MULTILINE)
    return f"{found.group(1)}: {found.group(2)}"[:400] if found else None


def short_error(exc: BaseException) -> str:
    """The first meaningful line of a Spark/JVM error."""
    text = _error_text(exc)
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "JVM stacktrace", "Traceback")):
            line = re.sub(r"^(org\.[\w.$]+|java\.[\w.$]+|py4j\.[\w.$]+): ", "", line)
            return line[:400]
    return exc.__class__.__name__


def error_class(exc: BaseException) -> str | None:
    """Spark's error condition of ``exc`` (classic and Connect errors both carry it)."""
    try:
        return exc.getCondition()  # type: ignore[attr-defined]
    except Exception:
        return None
