"""TPC-DS for the tests and the benchmarks: the 24 tables (``examples/tpcds99/schema.sql``) filled
by the TPC-DS generator of PyPI's ``tpcgen-cli`` (cached per scale), optionally thinned to every
``keep``-th order (a small database whose queries still have rows), and random DML drawn from the
data's own values — sales and returns inserted (copies of sold rows under new order numbers),
updated (a column set to another row's value, an order number moved) and deleted in all three
channels, inventory moved, items re-priced and re-categorised, customers moving address,
demographics and promotions changed."""

from __future__ import annotations

import io
import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from psycopg2 import sql

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpcds99"
CACHE = Path(tempfile.gettempdir()) / "mvlog-tpcds"
FACTS = {  # a sales table, its order column, and its returns table with theirs
    "store_sales": ("ss_ticket_number", "store_returns", "sr_ticket_number"),
    "catalog_sales": ("cs_order_number", "catalog_returns", "cr_order_number"),
    "web_sales": ("ws_order_number", "web_returns", "wr_order_number"),
}


def tables() -> list[str]:
    return [line.split()[2] for line in (EXAMPLE / "schema.sql").read_text().splitlines()
            if line.startswith("CREATE TABLE")]


def generate(scale: float) -> Path:
    """The generator's pipe-separated files for ``scale`` (made once, then cached)."""
    folder = CACHE / f"sf{scale:g}"
    if (folder / "web_site.dat").exists():
        return folder
    tool = shutil.which("tpcgen-cli")
    if tool is None:
        raise RuntimeError("tpcgen-cli is missing: pip install tpcgen-cli (the test and bench extras have it)")
    scratch = Path(tempfile.mkdtemp(prefix="tpcds-", dir=CACHE.parent))
    subprocess.run([tool, "tpcds", "-s", f"{scale:g}", f"--output-dir={scratch}"], check=True, capture_output=True)
    CACHE.mkdir(exist_ok=True)
    scratch.rename(folder)
    return folder


def _kept(table: str, fields: list[str], columns: list[str], keep: int, demographics: set[str] | None) -> bool:
    if table == "customer_demographics" and demographics is not None:
        return fields[0] in demographics
    if keep <= 1:
        return True
    if table in FACTS or table in {r for _, r, _ in FACTS.values()}:
        order = next(c for c in columns if c.endswith(("_ticket_number", "_order_number")))
        value = fields[columns.index(order)]
        return bool(value) and int(value) % keep == 0
    if table == "inventory":
        return int(fields[1]) % keep == 0  # items
    if table == "customer_demographics" and demographics is not None:
        return fields[0] in demographics
    return True



def _rows(path: Path, table: str, columns: list[str], keep: int, demographics: set[str] | None) -> io.StringIO:
    out = io.StringIO()
    with path.open(encoding="latin-1") as lines:
        for line in lines:
            fields = line.rstrip("\n").split("|")[:len(columns)]
            if _kept(table, fields, columns, keep, demographics):
                out.write("|".join(fields) + "\n")
    out.seek(0)
    return out


def load(db, scale: float = 0.01, keep: int = 1) -> None:
    """The schema and the generated rows into test database ``db`` (:func:`load_dsn`)."""
    load_dsn(db.dsn, scale, keep)


def with_columns_of(cur, table: str) -> list[str]:
    """``table``'s columns, in order."""
    cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
                "ORDER BY attnum", (table,))
    return [r[0] for r in cur.fetchall()]


def load_dsn(dsn: str, scale: float = 0.01, keep: int = 1, indexed: bool = True) -> dict[str, int]:
    """The schema and the generated rows (every ``keep``-th order of each channel, the returns of
    those orders, every ``keep``-th item's inventory; the demographics some row names), the fact
    tables' ``*_sk`` columns indexed; the rows of each table."""
    import psycopg2

    folder = generate(scale)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute((EXAMPLE / "schema.sql").read_text())
        columns = {t: with_columns_of(cur, t) for t in tables()}
        for table in tables():
            if table == "customer_demographics":
                continue
            cur.copy_expert(sql.SQL("COPY {} FROM STDIN WITH (FORMAT text, DELIMITER '|', NULL '')")
                            .format(sql.Identifier(table)).as_string(cur),
                            _rows(folder / f"{table}.dat", table, columns[table], keep, None))
        cur.execute("SELECT DISTINCT d::text FROM (SELECT c_current_cdemo_sk FROM customer UNION ALL "
                    "SELECT ss_cdemo_sk FROM store_sales UNION ALL SELECT cs_bill_cdemo_sk FROM catalog_sales "
                    "UNION ALL SELECT ws_bill_cdemo_sk FROM web_sales UNION ALL SELECT sr_cdemo_sk FROM store_returns "
                    "UNION ALL SELECT cr_refunded_cdemo_sk FROM catalog_returns UNION ALL SELECT wr_refunded_cdemo_sk "
                    "FROM web_returns) AS x(d) WHERE d IS NOT NULL")
        named = {r[0] for r in cur.fetchall()}  # 1.9 million rows at any scale: only those some row names
        cur.copy_expert("COPY customer_demographics FROM STDIN WITH (FORMAT text, DELIMITER '|', NULL '')",
                        _rows(folder / "customer_demographics.dat", "customer_demographics",
                              columns["customer_demographics"], keep, named))
        if indexed:
            for table in [*FACTS, *(r for _, r, _ in FACTS.values()), "inventory"]:
                for column in columns[table]:
                    if column.endswith("_sk"):
                        cur.execute(sql.SQL("CREATE INDEX ON {} ({})").format(sql.Identifier(table),
                                                                               sql.Identifier(column)))
        counts = {}
        for table in tables():
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
            counts[table] = cur.fetchone()[0]
    with psycopg2.connect(dsn) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ANALYZE")
    return counts


# -- random DML drawn from the data -------------------------------------------------------------

CHANGED = {  # per table, the columns its updates set (to a value another row has)
    "store_sales": ["ss_sold_date_sk", "ss_item_sk", "ss_customer_sk", "ss_store_sk", "ss_quantity",
                    "ss_sales_price", "ss_ext_sales_price", "ss_net_profit", "ss_promo_sk", "ss_cdemo_sk"],
    "catalog_sales": ["cs_sold_date_sk", "cs_item_sk", "cs_bill_customer_sk", "cs_quantity", "cs_sales_price",
                      "cs_ext_sales_price", "cs_net_profit", "cs_call_center_sk", "cs_warehouse_sk"],
    "web_sales": ["ws_sold_date_sk", "ws_item_sk", "ws_bill_customer_sk", "ws_quantity", "ws_sales_price",
                  "ws_ext_sales_price", "ws_net_profit", "ws_web_site_sk"],
    "store_returns": ["sr_returned_date_sk", "sr_return_amt", "sr_return_quantity", "sr_net_loss", "sr_reason_sk"],
    "catalog_returns": ["cr_returned_date_sk", "cr_return_amount", "cr_return_quantity", "cr_net_loss"],
    "web_returns": ["wr_returned_date_sk", "wr_return_amt", "wr_return_quantity", "wr_net_loss"],
    "inventory": ["inv_quantity_on_hand"],
    "item": ["i_current_price", "i_category", "i_class", "i_brand", "i_manufact_id", "i_color"],
    "customer": ["c_current_addr_sk", "c_current_cdemo_sk", "c_birth_year", "c_preferred_cust_flag"],
    "customer_address": ["ca_state", "ca_city", "ca_county", "ca_gmt_offset"],
    "customer_demographics": ["cd_marital_status", "cd_education_status", "cd_gender"],
    "promotion": ["p_channel_email", "p_channel_tv", "p_channel_event"],
}
KEYS = {t: k for t, k in {
    "store_sales": ["ss_item_sk", "ss_ticket_number"], "catalog_sales": ["cs_item_sk", "cs_order_number"],
    "web_sales": ["ws_item_sk", "ws_order_number"], "store_returns": ["sr_item_sk", "sr_ticket_number"],
    "catalog_returns": ["cr_item_sk", "cr_order_number"], "web_returns": ["wr_item_sk", "wr_order_number"],
    "inventory": ["inv_date_sk", "inv_item_sk", "inv_warehouse_sk"], "item": ["i_item_sk"],
    "customer": ["c_customer_sk"], "customer_address": ["ca_address_sk"],
    "customer_demographics": ["cd_demo_sk"], "promotion": ["p_promo_sk"]}.items()}
SAMPLE = 40  # rows and values per table and column the DML draws from


def pools(db, seed: int = 7) -> dict:
    """Per table: some keys, and per changed column some of its values (the DML's domains)."""
    rng = random.Random(seed)
    found: dict = {}
    for table, keys in KEYS.items():
        rows = db.execute(sql.SQL("SELECT {} FROM {} ORDER BY {} LIMIT 2000").format(
            sql.SQL(", ").join(map(sql.Identifier, keys)), sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, keys))))
        values = {c: [r[0] for r in db.execute(sql.SQL("SELECT DISTINCT {c} FROM {t} WHERE {c} IS NOT NULL LIMIT 200")
                                                .format(c=sql.Identifier(c), t=sql.Identifier(table)))]
                  for c in CHANGED[table]}
        found[table] = {"keys": rng.sample(rows, min(SAMPLE, len(rows))),
                        "values": {c: rng.sample(v, min(SAMPLE, len(v))) for c, v in values.items() if v}}
    return found


def _where(table: str) -> sql.Composed:
    return sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in KEYS[table])


def statement(domains: dict, table: str, kind: str, row: int, column: int, value: int, new_key: int
              ) -> tuple[sql.Composed, tuple]:
    """One DML statement on ``table``: ``kind`` of insert (a copy of a row under a new order
    number or key), update (a column to another row's value), rekey (a new order number), delete;
    the ints pick the row, column, value and new key from the domains."""
    keys = domains[table]["keys"][row % len(domains[table]["keys"])]
    columns = list(domains[table]["values"])
    name = sql.Identifier(table)
    moved = keys[-1] + 10_000_000 + new_key if table in KEYS and table not in ("inventory",) else keys[-1]
    if kind == "update" and columns:
        c = columns[column % len(columns)]
        v = domains[table]["values"][c][value % len(domains[table]["values"][c])]
        return sql.SQL("UPDATE {} SET {} = %s WHERE ").format(name, sql.Identifier(c)) + _where(table), (v, *keys)
    if kind == "delete":
        return sql.SQL("DELETE FROM {} WHERE ").format(name) + _where(table), tuple(keys)
    last = sql.Identifier(KEYS[table][-1])
    if kind == "rekey" and table != "inventory":
        taken = sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in KEYS[table])
        return (sql.SQL("UPDATE {} SET {} = %s WHERE ").format(name, last) + _where(table)
                + sql.SQL(" AND NOT EXISTS (SELECT FROM {} WHERE ").format(name) + taken + sql.SQL(")"),
                (moved, *keys, *keys[:-1], moved))
    # insert: the row copied under a new last key column (inventory: a new quantity on another date)
    others = [c for c in _all_columns(domains, table) if c != KEYS[table][-1]]
    copy = sql.SQL("INSERT INTO {t} ({cols}) SELECT {vals} FROM {t} WHERE ").format(
        t=name, cols=sql.SQL(", ").join(map(sql.Identifier, [*others, KEYS[table][-1]])),
        vals=sql.SQL(", ").join([*map(sql.Identifier, others), sql.Placeholder()]))
    return copy + _where(table) + sql.SQL(" ON CONFLICT DO NOTHING"), (moved, *keys)


def _all_columns(domains: dict, table: str) -> list[str]:
    return domains[table]["columns"]


def with_columns(db, domains: dict) -> dict:
    for table in domains:
        domains[table]["columns"] = [r[0] for r in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum", (table,))]
    return domains


def views(names: set[str] | None = None) -> Iterator[dict]:
    """The example's views (``names``: only those), each ``refresh: fast`` where asked."""
    import yaml

    for view in yaml.safe_load((EXAMPLE / "views.yaml").read_text()):
        if names is None or view["name"] in names:
            yield {"name": view["name"], "query": view["query"]}
