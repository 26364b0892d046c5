"""What ``capture: logical`` needs of the database and of a table, checked by ``mvlog apply``
with one sentence each; and what it should change (the WAL a slot may keep)."""

from __future__ import annotations

from mvlog.postgres.capture.slot import slot_name
from mvlog.postgres.source import Cursor, fetch_row


def refusal(cur: Cursor) -> str | None:
    """Why this database cannot have a logical capture, or None: ``wal_level``, a free
    replication slot, the right to use one."""
    cur.execute("SELECT current_setting('wal_level'), "
                "current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots), "
                "EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = %s), "
                "(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user) "
                "OR EXISTS (SELECT FROM pg_roles AS r WHERE r.rolname = 'rds_replication' "
                "           AND pg_has_role(current_user, r.oid, 'MEMBER'))", (slot_name(cur),))
    wal_level, free, has_slot, may = fetch_row(cur)
    if wal_level != "logical":
        return (f"capture: logical needs wal_level = logical (it is {wal_level}); set it in postgresql.conf "
                f"(on a managed service, its logical replication parameter) and restart PostgreSQL")
    if not may:
        return ("capture: logical needs a role with the REPLICATION attribute (ALTER ROLE … REPLICATION; "
                "on RDS/Aurora, GRANT rds_replication)")
    if not has_slot and free < 1:
        return "capture: logical needs a free replication slot (every one of max_replication_slots is in use)"
    return None


def wal_bound_warning(cur: Cursor) -> str | None:
    """What to change when nothing bounds the WAL a slot may retain (a capture that stops would
    let it fill the disk); None when ``max_slot_wal_keep_size`` is set."""
    cur.execute("SELECT current_setting('max_slot_wal_keep_size')")
    if fetch_row(cur)[0] not in ("-1", "-1MB"):
        return None
    return ("max_slot_wal_keep_size is unlimited: if the logical capture stops, its replication slot keeps "
            "every WAL file from then on; bound it (ALTER SYSTEM SET max_slot_wal_keep_size = '20GB'; "
            "SELECT pg_reload_conf()) — a slot that passes it is invalidated and its views refresh completely")


def replica_identity_refusal(cur: Cursor, oid: int, qualified: str) -> str | None:
    """Why a table cannot be captured logically, or None: its replica identity must be its
    primary key (the publication publishes only the key, so FULL or NOTHING would stop its
    writers' UPDATEs and DELETEs)."""
    cur.execute("SELECT c.relreplident, (SELECT i.indisprimary FROM pg_index AS i "
                "WHERE i.indrelid = c.oid AND i.indisreplident) FROM pg_class AS c WHERE c.oid = %s", (oid,))
    identity, primary = fetch_row(cur)
    if identity == "d" or (identity == "i" and primary):
        return None
    what = {"f": "FULL", "n": "NOTHING", "i": "an index other than the primary key"}.get(identity, identity)
    return (f"table {qualified} has REPLICA IDENTITY {what}; capture: logical needs its primary key "
            f"(ALTER TABLE {qualified} REPLICA IDENTITY DEFAULT)")
