"""pgoutput messages decoded into log rows (protocol version 1), built byte by byte as PostgreSQL
sends them."""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest

from mvlog.errors import SourceError
from mvlog.postgres.capture.pgoutput import PG_EPOCH, Decoder, full_xid, lsn_text, lsn_value


def string(text: str) -> bytes:
    return text.encode() + b"\0"


def begin(lsn: int, micros: int, xid: int) -> bytes:
    return b"B" + struct.pack("!QqI", lsn, micros, xid)


def relation(oid: int, schema: str, name: str, columns: list[str]) -> bytes:
    body = b"R" + struct.pack("!I", oid) + string(schema) + string(name) + b"d" + struct.pack("!h", len(columns))
    for column in columns:
        body += b"\1" + string(column) + struct.pack("!Ii", 23, -1)
    return body


def tuple_data(values: list[str | None]) -> bytes:
    body = struct.pack("!h", len(values))
    for value in values:
        body += b"n" if value is None else b"t" + struct.pack("!I", len(value.encode())) + value.encode()
    return body


def rows(decoder: Decoder, *messages: bytes) -> list[tuple]:
    return [(c.relation, c.columns, c.key, c.dmltype, c.old_new, c.xid, c.commit_lsn)
            for m in messages for c in decoder.decode(m)]


def test_inserts_updates_deletes_and_truncates_become_log_rows():
    decoder = Decoder()
    found = rows(
        decoder,
        begin(0x1_0000_0010, 5_000_000, 731),
        relation(16400, "public", "orders", ["id", "day"]),
        b"I" + struct.pack("!I", 16400) + b"N" + tuple_data(["7", "2026-01-02"]),
        b"U" + struct.pack("!I", 16400) + b"N" + tuple_data(["7", "2026-01-02"]),  # key unchanged
        b"U" + struct.pack("!I", 16400) + b"K" + tuple_data(["7", "2026-01-02"]) + b"N" + tuple_data(["8", "x y"]),
        b"D" + struct.pack("!I", 16400) + b"K" + tuple_data(["9", "z\tq"]),
        b"T" + struct.pack("!IbI", 1, 0, 16400),
        b"C" + struct.pack("!bQQq", 0, 0x1_0000_0010, 0x1_0000_0040, 5_000_000),
    )
    columns = ("id", "day")
    assert found == [
        (16400, columns, ("7", "2026-01-02"), "I", "N", 731, 0x1_0000_0010),
        (16400, columns, ("7", "2026-01-02"), "U", "N", 731, 0x1_0000_0010),
        (16400, columns, ("7", "2026-01-02"), "D", "O", 731, 0x1_0000_0010),  # a key update: old key left,
        (16400, columns, ("8", "x y"), "I", "N", 731, 0x1_0000_0010),  # the new one came
        (16400, columns, ("9", "z\tq"), "D", "O", 731, 0x1_0000_0010),
        (16400, columns, None, "T", "O", 731, 0x1_0000_0010),
    ]
    assert decoder.commit_time == PG_EPOCH + timedelta(seconds=5)


def test_an_unchanged_large_key_value_is_refused_in_one_sentence():
    decoder = Decoder()
    list(decoder.decode(relation(1, "s", "t", ["k"])))
    with pytest.raises(SourceError, match="unchanged large value for a key column of s.t"):
        list(decoder.decode(b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!h", 1) + b"u"))


@pytest.mark.parametrize(("xid", "next_xid", "full"), [
    (731, 1000, 731),
    (4_294_967_290, (1 << 32) + 5, 4_294_967_290),  # before the epoch wrapped
    (3, (1 << 32) + 5, (1 << 32) + 3),  # after it
    (1017, 1016, 1017),  # a reference (a snapshot's xmax) older than a decoded commit
    (2, (1 << 32) - 3, (1 << 32) + 2),  # ... across the epoch's wrap
    (4_294_967_294, (1 << 32) + 1, 4_294_967_294),
])
def test_full_xid_puts_a_32_bit_xid_in_its_epoch(xid, next_xid, full):
    assert full_xid(xid, next_xid) == full


def test_lsn_text_round_trips():
    assert lsn_text(0x16_B374D848) == "16/B374D848"
    assert lsn_value("16/B374D848") == 0x16_B374D848
    assert lsn_value(lsn_text(5)) == 5
