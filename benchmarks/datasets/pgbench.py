"""pgbench's tables for the benchmarks: ``pgbench -i`` at a scale (100,000 accounts each) and its
TPC-B-like writer, over TCP as the throwaway cluster's superuser."""

from __future__ import annotations

import os
import subprocess

from mvlog.postgres.pgtemp import SUPERUSER, TempPostgres

LOGGED = ("pgbench_accounts", "pgbench_tellers", "pgbench_branches")
# PostgreSQL's default durability (fsync, synchronous_commit and full_page_writes on): what writers pay.
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


def pgbench(pg: TempPostgres, *args: str, database: str = "postgres") -> str:
    """Run pgbench over TCP as the superuser (the password from PGPASSWORD); its stdout."""
    cmd = [str(pg.bin_dir / "pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", SUPERUSER, *args, database]
    result = subprocess.run(cmd, env={**os.environ, "PGPASSWORD": pg.password}, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args)} failed: {result.stderr.strip()[-800:]}")
    return result.stdout


def initialize(pg: TempPostgres, scale: float) -> None:
    """``pgbench -i`` at ``scale`` with primary keys (``-I dtgvp``)."""
    pgbench(pg, "-i", "-q", "-s", f"{scale:g}", "-I", "dtgvp")
