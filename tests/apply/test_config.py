"""Configuration parsing and validation (no database, no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mvlog.config import CHECKPOINT_INTERVALS, RefreshMethod, load_config, parse_config
from mvlog.errors import ConfigError

VALID = """\
source:
  dsn: postgresql://app:s3cret@db.example:5432/shop
warehouse: ./warehouse
spark:
  master: local[*]
  conf: {spark.sql.shuffle.partitions: 8, spark.x.flag: true}
logs:
  - table: public.orders
  - table: public.customers
views:
  - name: customer_revenue
    refresh: force
    schedule: "*/5 * * * *"
    group: sales
    query: |
      SELECT c.id FROM public.customers c
  - name: open_orders
    query: SELECT id FROM public.orders WHERE status = 'open'
"""


def test_valid_config_is_typed(tmp_path):
    config = parse_config(VALID, base_dir=tmp_path)
    assert config.views[0].refresh is RefreshMethod.FORCE and config.views[1].refresh is RefreshMethod.FORCE
    assert config.views[0].group == "sales" and config.views[1].schedule is None
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "8", "spark.x.flag": "true"}
    assert config.warehouse_uri == str((tmp_path / "warehouse").resolve())


def test_object_store_warehouse_is_kept_as_is():
    config = parse_config(VALID.replace("./warehouse", "s3a://bucket/lake/"))
    assert config.warehouse_uri == "s3a://bucket/lake"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("  master: local[*]", "  master: local[*]\n  mastr: x"), "mvlog.yaml:6: spark: unknown key 'mastr'"),
        (("    refresh: force", "    refresh: sometimes"),
         "mvlog.yaml:12: views[0].refresh (customer_revenue): must be one of 'fast', 'complete' or 'force'"),
        (("  - name: open_orders", "  - name: open-orders"),
         "mvlog.yaml:17: views[1].name (open-orders): a view name must start with a letter"),
        (("  - name: open_orders", "  - name: Customer_Revenue"),
         "view name 'Customer_Revenue' is already used by views[0]"),
        (("  - table: public.customers", "  - table: public.orders"),
         "table 'public.orders' is already listed at logs[0]"),
        (('    schedule: "*/5 * * * *"', '    schedule: "every minute"'), "is not a valid cron expression"),
        (('    schedule: "*/5 * * * *"', '    freshness: 10 minutes'),
         "views[0].freshness (customer_revenue): '10 minutes' is not a duration (e.g. 30s, 10m"),
        (("warehouse: ./warehouse\n", ""), "missing required key 'warehouse'"),
        (("    query: SELECT id FROM public.orders WHERE status = 'open'", ""),
         "views[1] (open_orders): missing required key 'query'"),
        (("logs:\n  - table: public.orders\n  - table: public.customers", "logs: public.orders"),
         "logs: Input should be a valid list"),
        (("  - table: public.orders", "  - table: [public, orders]"), "logs[0].table: Input should be a valid string"),
        (("    group: sales", "    group: {name: sales}"),
         "views[0].group (customer_revenue): Input should be a valid string"),
        (("  conf: {spark.sql.shuffle.partitions: 8, spark.x.flag: true}", "  conf: [1, 2]"),
         "spark.conf: Input should be a valid dictionary"),
        (("  master: local[*]", "  master: local[*]\n  remote: http://engine:15002"),
         "mvlog.yaml:6: spark.remote: 'http://engine:15002' is not a Spark Connect URL"),
        (("  master: local[*]", "  master: local[*]\n  remote: sc://"), "is not a Spark Connect URL (sc://host:port)"),
    ],
)
def test_invalid_config_names_the_place(change, message):
    text = VALID.replace(*change)
    assert text != VALID
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert message in str(info.value)
    assert "s3cret" not in str(info.value)


def test_freshness_is_a_duration():
    from datetime import timedelta

    from mvlog.timeouts import parse_duration

    config = parse_config(VALID.replace('    schedule: "*/5 * * * *"', '    freshness: 1h30m'))
    assert config.views[0].freshness == timedelta(minutes=90)
    assert [parse_duration(v) for v in ("45s", "10m", "2h", "1d", 90, "120")] == [
        timedelta(seconds=s) for s in (45, 600, 7200, 86400, 90, 120)]
    for bad in ("0s", "-5m", "5 min", "m", True):
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration(bad)


def test_an_empty_logs_or_views_key_is_an_empty_list():
    text = "source:\n  dsn: postgresql://x@h/db\nwarehouse: ./w\nlogs:\nviews:\n"
    config = parse_config(text)
    assert config.logs == [] and config.views == []
    config = parse_config(VALID[:VALID.index("views:")] + "views:\n")
    assert [log.table for log in config.logs] == ["public.orders", "public.customers"] and config.views == []


def test_spark_remote_is_a_connect_url(tmp_path):
    text = VALID.replace("  master: local[*]", "  master: local[*]\n  remote: sc://engine.internal:443/;use_ssl=true;token=t0k")
    assert parse_config(text, base_dir=tmp_path).spark.remote == "sc://engine.internal:443/;use_ssl=true;token=t0k"


def test_malformed_yaml_gives_the_line():
    with pytest.raises(ConfigError, match=r"^mvlog.yaml:3: malformed YAML"):
        parse_config("source:\n  dsn: x\n  - oops: [\n")


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError, match="expected a mapping"):
        parse_config("- just\n- a list\n")


def test_env_expansion(monkeypatch):
    monkeypatch.setenv("SHOP_PASSWORD", "p@ss word")
    config = parse_config(VALID.replace("app:s3cret@", "app:${SHOP_PASSWORD}@"))
    assert config.source.dsn == "postgresql://app:p@ss word@db.example:5432/shop"
    monkeypatch.delenv("SHOP_PASSWORD")
    with pytest.raises(ConfigError,
                       match=r"mvlog.yaml:2: source.dsn refers to environment variable \$\{SHOP_PASSWORD\}"):
        parse_config(VALID.replace("app:s3cret@", "app:${SHOP_PASSWORD}@"))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_config_path_from_environment(tmp_path, monkeypatch):
    path = tmp_path / "custom.yaml"
    path.write_text(VALID)
    monkeypatch.setenv("MVLOG_CONFIG", str(path))
    assert load_config().base_dir == Path(tmp_path).resolve()


def test_deletion_vectors_are_off_unless_the_warehouse_or_the_view_asks():
    config = parse_config(VALID)
    assert [config.deletion_vectors(v) for v in config.views] == [False, False]
    own = "    deletion_vectors: false\n    query: SELECT id FROM public.orders"
    config = parse_config(VALID.replace("logs:", "delta: {deletion_vectors: true}\nlogs:").replace(
        "    query: SELECT id FROM public.orders", own))
    assert [config.deletion_vectors(v) for v in config.views] == [True, False]
    with pytest.raises(ConfigError, match="delta: unknown key 'deletion_vector'"):
        parse_config(VALID.replace("logs:", "delta: {deletion_vector: true}\nlogs:"))


def test_views_take_the_checkpoint_intervals_in_turn_unless_spark_sets_one():
    # Views refreshed together commit together: with one interval, every table of a fleet would
    # write its checkpoint in the same refresh.
    views = "".join(f"  - name: v{i:02d}\n    query: SELECT id FROM public.orders\n" for i in range(60))
    config = parse_config(VALID.split("views:")[0] + "views:\n" + views)
    intervals = [config.checkpoint_interval(v) for v in config.views]
    assert intervals[:len(CHECKPOINT_INTERVALS)] == list(CHECKPOINT_INTERVALS)
    assert all(intervals.count(i) == 60 // len(CHECKPOINT_INTERVALS) for i in CHECKPOINT_INTERVALS)
    assert sum(CHECKPOINT_INTERVALS) / len(CHECKPOINT_INTERVALS) == 10  # as many checkpoints as Delta's default
    # Spark's default for new tables is the user's: mvlog sets none.
    config = parse_config(VALID.replace("spark.x.flag: true", "spark.databricks.delta.properties.defaults."
                                                              "checkpointInterval: 100"))
    assert [config.checkpoint_interval(v) for v in config.views] == [None, None]


def test_a_metastore_directory_is_relative_to_the_file_and_a_uri_is_kept(tmp_path):
    (tmp_path / "mvlog.yaml").write_text(VALID + "catalog: {database: mv, metastore: ./meta}\n")
    assert load_config(tmp_path / "mvlog.yaml").metastore_uri() == str((tmp_path / "meta").resolve())
    uri = parse_config(VALID + "catalog: {database: mv, metastore: 'thrift://hms:9083'}\n").metastore_uri()
    assert uri == "thrift://hms:9083"
    assert parse_config(VALID + "catalog: {database: mv}\n").metastore_uri() is None
