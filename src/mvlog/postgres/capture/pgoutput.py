"""PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1), decoded into the
rows of mvlog's logs.

What :func:`pg_logical_slot_peek_binary_changes` returns for a slot of the ``pgoutput`` plugin is
one message per row: Begin, Relation, Insert, Update, Delete, Truncate, Commit (and Origin, Type,
which mvlog does not need). The publication lists only the primary-key columns of each table, so a
tuple holds just its key, in text form — exactly what ``COPY ... FROM STDIN`` reads back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from mvlog.errors import SourceError

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_I8, _I16, _I32, _I64 = struct.Struct("!b"), struct.Struct("!h"), struct.Struct("!I"), struct.Struct("!Q")


@dataclass(frozen=True)
class Relation:
    """A table as a Relation message describes it: its oid and the columns published."""

    oid: int
    schema: str
    name: str
    columns: tuple[str, ...]


class Change(NamedTuple):  # a tuple: made once per changed row, so it must be cheap to make
    """One log row: the changed key (text values, None for a TRUNCATE), its dmltype$$ and old_new$$,
    and the source transaction it belongs to."""

    relation: int
    columns: tuple[str, ...]  # the published columns ``key`` holds, in order
    key: tuple[str | None, ...] | None
    dmltype: str
    old_new: str
    xid: int  # 32-bit, as the Begin message gives it
    commit_lsn: int
    commit_time: datetime


@dataclass
class Decoder:
    """Decodes a stream of pgoutput messages; keeps the relations seen and the open transaction."""

    relations: dict[int, Relation] = field(default_factory=dict)
    xid: int = 0
    commit_lsn: int = 0
    commit_time: datetime = PG_EPOCH

    def decode(self, message: bytes | memoryview) -> Iterator[Change]:
        """The log rows one message means (none for Begin, Relation, Commit and the others)."""
        data = bytes(message)
        kind = data[:1]
        if kind == b"B":
            self.commit_lsn = _I64.unpack_from(data, 1)[0]
            self.commit_time = PG_EPOCH + timedelta(microseconds=struct.unpack_from("!q", data, 9)[0])
            self.xid = _I32.unpack_from(data, 17)[0]
        elif kind == b"R":
            self._relation(data)
        elif kind == b"I":
            relid = _I32.unpack_from(data, 1)[0]
            key, _ = self._tuple(data, 6, relid)
            yield self._change(relid, key, "I", "N")
        elif kind == b"U":
            relid = _I32.unpack_from(data, 1)[0]
            offset, old = 5, None
            if data[offset:offset + 1] in (b"K", b"O"):
                old, offset = self._tuple(data, offset + 1, relid)
            new, _ = self._tuple(data, offset + 1, relid)  # after the 'N'
            if old is None or old == new:
                yield self._change(relid, new, "U", "N")
            else:  # the key changed: the old key left, the new one came (as the triggers log it)
                yield self._change(relid, old, "D", "O")
                yield self._change(relid, new, "I", "N")
        elif kind == b"D":
            relid = _I32.unpack_from(data, 1)[0]
            key, _ = self._tuple(data, 6, relid)
            yield self._change(relid, key, "D", "O")
        elif kind == b"T":
            count = _I32.unpack_from(data, 1)[0]
            for i in range(count):
                yield self._change(_I32.unpack_from(data, 6 + 4 * i)[0], None, "T", "O")

    def _change(self, relid: int, key: tuple[str | None, ...] | None, dmltype: str, old_new: str) -> Change:
        relation = self.relations.get(relid)
        return Change(relid, relation.columns if relation else (), key, dmltype, old_new, self.xid,
                      self.commit_lsn, self.commit_time)

    def _relation(self, data: bytes) -> None:
        relid = _I32.unpack_from(data, 1)[0]
        schema, offset = _string(data, 5)
        name, offset = _string(data, offset)
        offset += 1  # replica identity setting
        count = _I16.unpack_from(data, offset)[0]
        offset += 2
        columns = []
        for _ in range(count):
            column, offset = _string(data, offset + 1)  # after the flags
            columns.append(column)
            offset += 8  # type oid, typmod
        self.relations[relid] = Relation(relid, schema, name, tuple(columns))

    def _tuple(self, data: bytes, offset: int, relid: int) -> tuple[tuple[str | None, ...], int]:
        count = _I16.unpack_from(data, offset)[0]
        offset += 2
        values: list[str | None] = []
        for _ in range(count):
            kind = data[offset:offset + 1]
            offset += 1
            if kind == b"t":
                length = _I32.unpack_from(data, offset)[0]
                values.append(data[offset + 4:offset + 4 + length].decode())
                offset += 4 + length
            elif kind == b"n":
                values.append(None)
            else:  # 'u': an unchanged TOASTed value, which a key never is in a published key tuple
                relation = self.relations.get(relid)
                raise SourceError(f"logical decoding sent an unchanged large value for a key column of "
                                  f"{relation.schema + '.' + relation.name if relation else relid}")
        return tuple(values), offset


def _string(data: bytes, offset: int) -> tuple[str, int]:
    end = data.index(b"\0", offset)
    return data[offset:end].decode(), end + 1


def commit_end(message: bytes | memoryview) -> int:
    """The end of the commit record of a Commit message: every transaction that committed
    before it has been sent when it arrives."""
    return _I64.unpack_from(bytes(message), 10)[0]


def full_xid(xid: int, reference: int) -> int:
    """The 64-bit id of a 32-bit ``xid`` within 2^31 transactions of the 64-bit ``reference``,
    before or after it (PostgreSQL's ``FullXidRelativeTo``). A committed transaction is at most
    2^31 transactions old (the wraparound guard), and a snapshot's xmax can lag a commit that
    decoding has already sent: the commit record is flushed before the transaction leaves the
    proc array, so the reference may be older than the xid."""
    distance = (xid - reference) & 0xFFFFFFFF
    if distance >= 1 << 31:
        distance -= 1 << 32
    return reference + distance


def lsn_text(lsn: int) -> str:
    """A WAL position as PostgreSQL writes it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_value(text: str) -> int:
    """A WAL position from its text form."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
