"""Soak: writers keep writing while refreshes loop; nothing is lost and a refresh group stays consistent."""

from __future__ import annotations

import os
import random
import threading
import time

import psycopg2
import pytest
from conftest import assert_views_match

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCHEMA = """
CREATE TABLE branches (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE accounts (id int PRIMARY KEY, branch int NOT NULL, balance numeric(14,2) NOT NULL);
INSERT INTO branches SELECT g, 'branch ' || g FROM generate_series(1, 5) g;
INSERT INTO accounts SELECT g, 1 + g % 5, 1000 FROM generate_series(1, 300) g;
"""
VIEWS = [
    {"name": "account_list", "refresh": "fast", "group": "bank",
     "query": "SELECT id, branch, balance FROM accounts"},
    {"name": "branch_totals", "refresh": "fast", "group": "bank",
     "query": "SELECT branch, count(*) AS accounts, sum(balance) AS total FROM accounts GROUP BY branch"},
    {"name": "account_branch", "refresh": "fast", "group": "bank",
     "query": "SELECT a.id, b.name, a.balance FROM accounts a JOIN branches b ON b.id = a.branch"},
]
WRITERS = 3
# Long enough for several group refreshes under load; deep runs (the thorough profile) soak longer.
SECONDS = 150 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 25


class Writer(threading.Thread):
    """Random transactions; money only moves, so the bank's total is constant."""

    def __init__(self, dsn: str, seed: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.dsn, self.random, self.stop = dsn, random.Random(seed), stop
        self.seed = seed
        self.statements = 0
        self.transactions = 0
        self.longest = 0.0
        self.error: BaseException | None = None

    def timed(self, cur, statement: str, params=()) -> None:
        started = time.perf_counter()
        cur.execute(statement, params)
        self.longest = max(self.longest, time.perf_counter() - started)
        self.statements += 1

    def run(self) -> None:
        conn = psycopg2.connect(self.dsn)
        try:
            while not self.stop.is_set():
                try:
                    with conn.cursor() as cur:
                        self.transaction(cur)
                    conn.commit()
                    self.transactions += 1
                except (psycopg2.errors.UniqueViolation, psycopg2.errors.DeadlockDetected,
                        psycopg2.errors.SerializationFailure):
                    conn.rollback()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            conn.close()

    def transaction(self, cur) -> None:
        r = self.random
        kind = r.random()
        a, b = r.randint(1, 400), r.randint(1, 400)  # shared accounts: short transactions only
        if kind < 0.45:  # transfer
            amount = round(r.uniform(1, 50), 2)
            self.timed(cur, "UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a))
            self.timed(cur, "UPDATE accounts SET balance = balance + %s WHERE id = %s AND EXISTS "
                            "(SELECT 1 FROM accounts WHERE id = %s)", (amount, b, a))
            if cur.rowcount == 0:
                self.timed(cur, "UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, a))
        elif kind < 0.6:  # open an account with money from another
            self.timed(cur, "INSERT INTO accounts SELECT %s, %s, 0 "
                            "WHERE NOT EXISTS (SELECT 1 FROM accounts WHERE id = %s)",
                       (a, r.randint(1, 5), a))
        elif kind < 0.7:  # close an account, its balance goes to another
            self.timed(cur, "UPDATE accounts SET balance = balance "
                            "+ coalesce((SELECT balance FROM accounts WHERE id = %s), 0) "
                            "WHERE id = (SELECT min(id) FROM accounts WHERE id <> %s)", (a, a))
            self.timed(cur, "DELETE FROM accounts WHERE id = %s "
                            "AND EXISTS (SELECT 1 FROM accounts WHERE id <> %s)", (a, a))
        elif kind < 0.8:  # renumber an account: a primary-key update
            self.timed(cur, "UPDATE accounts SET id = %s WHERE id = %s", (a, b))
        elif kind < 0.9:  # move to another branch
            self.timed(cur, "UPDATE accounts SET branch = %s WHERE id = %s", (r.randint(1, 5), a))
        else:  # a long transaction, across refreshes, on rows no other writer touches (so that the
            # longest statement measures mvlog, not row locks between writers)
            own = 100000 + self.seed
            self.timed(cur, "INSERT INTO accounts VALUES (%s, 1, 0) ON CONFLICT (id) DO UPDATE SET branch = "
                            "1 + accounts.branch %% 5", (own,))
            time.sleep(r.uniform(0.5, 2.0))
            self.timed(cur, "UPDATE branches SET name = %s WHERE id = %s", (f"branch v{b}", 1 + self.seed % 5))


def test_writers_during_refreshes_lose_nothing_and_groups_agree(db, make_project, capsys):
    db.execute(SCHEMA)
    project = make_project(["branches", "accounts"], VIEWS)
    project.apply()
    spark = project.warehouse.spark
    stop = threading.Event()
    writers = [Writer(db.dsn, seed, stop) for seed in range(WRITERS)]
    for w in writers:
        w.start()
    refreshes = 0
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            results = project.refresh(group="bank")
            assert [r.error for r in results] == [None] * len(VIEWS)
            refreshes += 1
            # One stamp and one snapshot for the group: detail and totals agree at every refresh.
            detail = spark.read.format("delta").load(project.config.view_location("account_list"))
            totals = spark.read.format("delta").load(project.config.view_location("branch_totals"))
            by_branch = {r["branch"]: (r["n"], r["s"]) for r in
                         detail.groupBy("branch").agg({"*": "count", "balance": "sum"})
                         .withColumnsRenamed({"count(1)": "n", "sum(balance)": "s"}).collect()}
            assert by_branch == {r["branch"]: (r["accounts"], r["total"]) for r in totals.collect()}
            assert sum(s for _, s in by_branch.values()) == 300 * 1000  # money is never created or lost
    finally:
        stop.set()
        for w in writers:
            w.join(timeout=30)
    assert [w.error for w in writers] == [None] * WRITERS
    results = project.refresh(group="bank")
    assert [r.error for r in results] == [None] * len(VIEWS)
    assert_views_match(project, VIEWS)
    statements = sum(w.statements for w in writers)
    transactions = sum(w.transactions for w in writers)
    longest = max(w.longest for w in writers)
    with capsys.disabled():
        print(f"\nsoak: {transactions} transactions ({statements} statements) by {WRITERS} writers during "
              f"{refreshes} group refreshes in {SECONDS} s; longest writer statement (incl. waits) "
              f"{longest * 1000:.1f} ms")
    assert refreshes >= 3 and transactions > 100
