"""The benchmark runner (``python -m benchmarks``): its scenarios list, each runs at its smallest
scale and writes its measures as JSON lines, and the report is written from those lines. Nothing
here asserts a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.harness import SPREAD_MIN_VIEWS, queries_in_postgres, same_work_spread, slower_by, slower_views
from benchmarks.scenarios import scenarios

ROOT = Path(__file__).resolve().parents[2]


def runner(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_the_runner_lists_every_scenario_with_its_parameters():
    listed = runner("list")
    assert listed.returncode == 0, listed.stderr
    for name, scenario in scenarios().items():
        assert name in listed.stdout
        assert all(f"--set {key}=" in listed.stdout for key in scenario.parameters)


def test_an_unknown_scenario_or_parameter_is_one_sentence():
    unknown = runner("run", "nope", "--here")
    assert unknown.returncode != 0 and "no scenario 'nope'" in unknown.stderr and "Traceback" not in unknown.stderr
    bad = runner("run", "tpcds", "--here", "--set", "colour=red")
    assert bad.returncode != 0 and "tpcds has no parameter colour" in bad.stderr and "Traceback" not in bad.stderr


def _record(scenario: str, measure: str, value: float, unit: str = "x", parameters: dict | None = None,
            **labels) -> dict:
    return {"scenario": scenario, "parameters": parameters or {"scale": 1.0, "views": ""},
            "machine": {"cores": 2, "memory_gib": 24.0},
            "revision": "abc", "started": "2026-11-28T00:00:00", "notes": ["a note"], "measure": measure,
            "value": value, "unit": unit, "labels": labels}


def test_the_report_shows_each_target_from_the_latest_run_and_replaces_only_its_section(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    old = _record("tpcds", "complete_over_fast", 1.5)
    new = {**_record("tpcds", "complete_over_fast", 3.4), "started": "2026-11-29T00:00:00"}
    (results / "tpcds.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(new) + "\n")
    target = tmp_path / "BENCHMARKS.md"
    target.write_text("# Benchmarks\n\nWritten by hand, kept.\n")
    report.write(results, target)
    report.write(results, target)  # again: the section replaced, not repeated
    text = target.read_text()
    assert text.count(report.START) == 1 and "Written by hand, kept." in text
    row = next(line for line in text.splitlines() if "TPC-DS view ≥ 3×" in line)
    assert "| 3.40× |" in row and "| yes |" in row  # the latest run, not the first, to two places
    (results / "tpcds.jsonl").write_text(json.dumps({**new, "value": 2.996}) + "\n")
    report.write(results, target)
    row = next(line for line in target.read_text().splitlines() if "TPC-DS view ≥ 3×" in line)
    assert "| 3.00× | **no** |" in row  # a ratio just under its target is not shown as the target
    assert "not measured yet" in next(line for line in text.splitlines() if "TPC-H: all 22" in line)


def test_each_target_takes_the_newest_run_that_measures_it(tmp_path):
    """pgbench's two targets differ in a parameter: each keeps its own run, whichever ran last; a
    TPC-DS run over a subset of the views, or with every view fast, measures none of the whole
    set's targets (a run from before ``refresh`` was a parameter has its default, force)."""
    results = tmp_path / "results"
    results.mkdir()
    engine = {"spark": "engine"}
    dv = _record("pgbench", "complete_over_fast", 5.2, parameters={"scale": 100.0, "deletion_vectors": True}, **engine)
    cow = {**_record("pgbench", "complete_over_fast", 1.5, parameters={"scale": 100.0, "deletion_vectors": False},
                     **engine), "started": "2026-11-29T00:00:00"}
    full = _record("tpcds", "complete_over_fast", 1.1)
    subset = {**_record("tpcds", "complete_over_fast", 4.0, parameters={"scale": 1.0, "views": "q03,q07"}),
              "started": "2026-11-29T00:00:00"}
    (results / "pgbench.jsonl").write_text(json.dumps(dv) + "\n" + json.dumps(cow) + "\n")
    every_fast = {**_record("tpcds", "complete_over_fast", 0.8, parameters={"scale": 1.0, "views": "",
                                                                             "refresh": "fast"}),
                  "started": "2026-11-30T00:00:00"}
    (results / "tpcds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (full, subset, every_fast)))
    lines = report.section(results).splitlines()
    row = lambda words: next(line for line in lines if words in line)  # noqa: E731
    assert "| 5.20× |" in row("deletion vectors, on the engine") and "| yes |" in row("deletion vectors, on the engine")
    assert "| 1.50× |" in row("copy-on-write, on the engine") and "| **no** |" in row("copy-on-write, on the engine")
    assert "| 1.10× |" in row("TPC-DS view ≥ 3×")  # not the subset's 4.0, nor every view fast's 0.8
    # both pgbench runs are shown (the latest, and the one the other target cites); tpcds's latest and its cited one
    assert "### pgbench (1)" in lines and "### pgbench (2)" in lines and "### tpcds (2)" in lines


def _run_smallest(name: str, tmp_path: Path) -> list[dict]:
    out = tmp_path / f"{name}.jsonl"
    done = runner("run", name, "--smallest", "--here", "--results", str(tmp_path / "results"), "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines and {line["scenario"] for line in lines} == {name}
    assert (tmp_path / "results" / f"{name}.jsonl").read_text() == out.read_text()
    first = lines[0]
    assert first["machine"]["cores"] >= 1 and first["revision"] and first["parameters"] == \
        scenarios()[name].values(smallest=True)
    return lines


@pytest.mark.integration
def test_the_compiler_scenario_runs_at_its_smallest_and_writes_its_measures(tmp_path):
    """The main tier's run of the harness end to end (a cluster, the examples' schemas, projects,
    the JSON lines), without Spark; the deep tier runs every other scenario."""
    lines = _run_smallest("compiler", tmp_path)
    measured = {(line["measure"], line["labels"].get("example")) for line in lines}
    assert {("validate", "shop"), ("compiler_cpu", "tpch22"), ("compiler_cpu_per_view", "shop")} <= measured
    assert all(line["value"] > 0 for line in lines)


@pytest.mark.integration
@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(set(scenarios()) - {"compiler"}))
def test_every_scenario_runs_at_its_smallest_and_writes_its_measures(tmp_path, name):
    lines = _run_smallest(name, tmp_path)
    assert lines and all(line["unit"] is not None for line in lines)


def test_phase_floor_targets_keep_their_workloads_apart(tmp_path):
    """A phase_floor run from before ``workloads`` measured pgbench alone and counts for pgbench's
    target; a later TPC-H run, whatever its pgbench ``scale`` parameter says, counts for TPC-H's."""
    results = tmp_path / "results"
    results.mkdir()
    old = _record("phase_floor", "worst_phase_over_primitive", 5.9, parameters={"scale": 100.0}, view="accounts")
    tpch = {**_record("phase_floor", "worst_phase_over_primitive", 1.1,
                      parameters={"scale": 100.0, "workloads": "tpch", "tpch_scale": 1.0, "deletion_vectors": True},
                      view="line_revenue", workload="tpch"), "started": "2026-11-29T00:00:00"}
    (results / "phase_floor.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(tpch) + "\n")
    lines = report.section(results).splitlines()
    pgbench_row = next(line for line in lines if line.startswith("| pgbench 10M, deletion vectors: every phase"))
    assert "| 5.90× |" in pgbench_row
    tpch_row = next(line for line in lines if line.startswith("| TPC-H SF 1, deletion vectors: every phase"))
    assert "| 1.10× |" in tpch_row and "| yes |" in tpch_row


def test_the_fleet_targets_take_a_run_with_a_spark_of_each_command_s_own(tmp_path):
    """#75 measured the fleet with a Spark per command: a newer run on the engine (whose JVM warms
    as the commands go, so that its ratios follow their order) is shown in its own section and
    measures none of the fleet's targets."""
    results = tmp_path / "results"
    results.mkdir()
    own = _record("fleet", "refresh_one_table_over_complete", 0.38, parameters={"engine": False})
    engine = {**_record("fleet", "refresh_one_table_over_complete", 0.2, parameters={"engine": True}),
              "started": "2026-11-30T00:00:00"}
    (results / "fleet.jsonl").write_text(json.dumps(own) + "\n" + json.dumps(engine) + "\n")
    lines = report.section(results).splitlines()
    row = next(line for line in lines if line.startswith("| the fleet, one table 1 % changed"))
    assert "| 0.38× |" in row and "| **no** |" in row
    assert "### fleet (1)" in lines and "### fleet (2)" in lines  # the engine's run is shown too


def test_the_same_work_spread_is_the_95th_percentile_of_a_view_s_two_timings():
    same = [(1.0, 1.0 + i / 100) for i in range(19)] + [(3.0, 1.0)]  # 20 views: ratios 1.00…1.18, and 3.0
    assert same_work_spread(same) == pytest.approx(1.18)  # the 19th of 20: the one outlier left out
    assert same_work_spread(same[:-1] + [(1.0, 3.0)]) == pytest.approx(1.18)  # slower either way round
    assert same_work_spread(same[:SPREAD_MIN_VIEWS - 1]) is None  # too few views tell no spread
    per_view = {"near": [({"seconds": 1.1, "method": "fast"}, {"seconds": 1.0})],
                "far": [({"seconds": 2.0, "method": "fast"}, {"seconds": 1.0})],
                "complete": [({"seconds": 9.0, "method": "complete"}, {"seconds": 1.0})]}
    assert slower_by(per_view, 1.0) == 2 and slower_by(per_view, 1.18) == 1  # a complete view is never counted
    # Fast in one round of three: that round's seconds, not the complete rounds' median.
    mixed = {"once": [({"seconds": 9.0, "method": "complete"}, {"seconds": 2.0}),
                      ({"seconds": 1.5, "method": "fast"}, {"seconds": 2.0}),
                      ({"seconds": 9.0, "method": "complete"}, {"seconds": 2.0})]}
    assert slower_by(mixed, 1.0) == 0
    # Fast and slower once, to be measured, then complete: force chose complete there.
    measured = {"then_complete": [({"seconds": 3.0, "method": "fast"}, {"seconds": 2.0}),
                                  ({"seconds": 2.5, "method": "complete"}, {"seconds": 2.0})],
                "kept_fast": [({"seconds": 2.5, "method": "complete"}, {"seconds": 2.0}),
                              ({"seconds": 3.0, "method": "fast"}, {"seconds": 2.0})]}
    assert slower_by(measured, 1.0) == 2 and slower_by(measured, 1.0, kept=True) == 1
    assert slower_views(measured, 1.0, kept=True) == {"kept_fast": pytest.approx(1.5)}  # named, with its ratio


def test_a_target_shows_what_its_run_measured_beside_it(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    records = [_record("tpcds", "fast_kept_slower_than_complete", 2, "count"),
               _record("tpcds", "fast_slower_than_complete", 5, "count"),
               _record("tpcds", "fast_slower_beyond_spread", 1, "count"), _record("tpcds", "same_work_spread", 1.5)]
    (results / "tpcds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    row = next(line for line in report.section(results).splitlines() if "slower than its complete one" in line)
    assert "| 2 (5 slower in a round force ran them fast, 1 by more than the same complete refresh moves " in row
    (results / "tpcds.jsonl").write_text(json.dumps(records[0]) + "\n")  # a run without the others
    row = next(line for line in report.section(results).splitlines() if "slower than its complete one" in line)
    assert "| 2 | **no** |" in row


def test_the_phase_floor_counts_each_application_s_statements_seconds_and_sessions(tmp_path):
    from benchmarks.scenarios.phase_floor import server_work

    log = tmp_path / "server.log"
    before = "2026-11-30 10:00:00.000 UTC [7] app=mvlog LOG:  duration: 9000.000 ms  statement: SELECT 0\n"
    log.write_text(before + "".join(
        f"2026-11-30 10:00:01.000 UTC [{pid}] app={app} LOG:  duration: {ms} ms  statement: SELECT 1\n"
        for pid, app, ms in ((11, "mvlog", "1.500"), (11, "mvlog", "0.500"), (12, "mvlog", "2.000"),
                             (13, "mvlog-spark", "40.000"))))
    assert server_work(log, len(before)) == {"mvlog": (pytest.approx(0.004), 3, 2),
                                             "mvlog-spark": (pytest.approx(0.04), 1, 1)}


def test_the_phase_floor_finds_the_refresh_s_read_in_the_server_s_log(tmp_path):
    from benchmarks.scenarios.phase_floor import executed, the_read

    read = 'SELECT "a" FROM (SELECT a\nFROM t\n) AS mvlog_src'
    before = f"2026-11-30 10:00:00.000 UTC [7] app=mvlog-spark LOG:  duration: 1.000 ms  execute C_1: {read}x\n"
    log = tmp_path / "server.log"
    log.write_text(before + "".join(
        f"2026-11-30 10:00:01.000 UTC [{pid}] app={app} LOG:  duration: 1.000 ms  {kind}: {text}\n"
        for pid, app, kind, text in (
            (11, "mvlog-spark", "execute <unnamed>", "SELECT * FROM (SELECT a\nFROM t\n) AS mvlog_src WHERE 1=0"),
            (12, "mvlog-spark", "execute C_1", read), (12, "mvlog-spark", "execute fetch from C_1", read),
            (13, "mvlog", "statement", "SELECT a FROM t) AS mvlog_src"))))
    statements = executed(log, len(before), "mvlog-spark")
    assert len(statements) == 3 and the_read(statements) == read  # the schema's and the other app's left out
    with pytest.raises(RuntimeError, match="found 2"):
        the_read([read, read + " WHERE x"])


@pytest.mark.integration
def test_a_failed_refresh_is_told_whether_the_view_s_query_itself_fails_in_postgresql(db, tmp_path):
    import yaml

    db.execute("CREATE TABLE sales (id int PRIMARY KEY, price numeric, profit numeric)")
    db.execute("INSERT INTO sales VALUES (1, 0, 5), (2, 3, 1)")
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({"source": {"dsn": db.dsn}, "views": [
        {"name": "margin", "query": "SELECT id, profit / price AS m FROM sales"},
        {"name": "total", "query": "SELECT sum(price) AS p FROM sales"},
        {"name": "unnamed", "query": "SELECT 1 / 0 AS never_run"}]}))
    output = ("Error: refresh of view margin failed: division by zero\n"
              "Error: refresh of view total failed: the warehouse is not writable")
    said = queries_in_postgres(config, output)
    assert said == ("margin's query fails in PostgreSQL too: division by zero; "
                    "total's query runs in PostgreSQL now (1 rows)")
    assert queries_in_postgres(config, "Error: the warehouse is not writable") == ""
