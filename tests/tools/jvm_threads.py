"""Every Java process's CPU by kind of thread while a command runs: the JIT compilers (C1, C2), the
garbage collector, Spark's task threads, the driver's py4j threads … One row per JVM (a sample
every 3 s of ``/proc``: a JVM that lives less than that may be missed), and the totals.

    python tests/tools/jvm_threads.py -- python -m pytest -n 2 --dist loadfile -m "not deep"

docs/benchmarks-history.md session 29: over the main tier the compilers took 36 % of the JVMs' CPU.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import time
from pathlib import Path

from suite_refresh_cost import thread_cpu_seconds

SAMPLE_EVERY = 3.0


def thread_kind(name: str) -> str:
    """A thread's kind from its name (``/proc/…/task/…/comm``, 15 characters at most)."""
    if "CompilerThre" in name:
        return "C2" if name.startswith("C2") else "C1"
    if "GC" in name:
        return "GC"
    if name.startswith("Executor task"):
        return "tasks"
    if name.startswith("Thread-"):
        return "driver (py4j)"
    return "other"


def sample(jvms: dict[int, dict[str, float]]) -> None:
    """Record, for every running JVM, each thread's CPU so far (keyed by thread id)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "java":
                continue
            threads = jvms.setdefault(int(entry.name), {})
            for task in (entry / "task").iterdir():
                threads[f"{task.name} {(task / 'comm').read_text().strip()}"] = thread_cpu_seconds(task / "stat")
        except OSError:  # the process or thread ended
            continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after --)")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    jvms: dict[int, dict[str, float]] = {}
    started = time.monotonic()
    process = subprocess.Popen(command)
    while process.poll() is None:
        sample(jvms)
        time.sleep(SAMPLE_EVERY)
    kinds = ["C1", "C2", "GC", "tasks", "driver (py4j)", "other"]
    print(f"command exited {process.returncode} after {time.monotonic() - started:.0f} s")
    print("| JVM | CPU-s | " + " | ".join(kinds) + " |")
    print("|---|---:|" + "---:|" * len(kinds))
    totals: collections.Counter[str] = collections.Counter()
    for pid, threads in sorted(jvms.items(), key=lambda item: -sum(item[1].values())):
        by_kind: collections.Counter[str] = collections.Counter()
        for key, seconds in threads.items():
            by_kind[thread_kind(key.split(" ", 1)[1])] += seconds
        totals.update(by_kind)
        print(f"| {pid} | {sum(by_kind.values()):.1f} | " + " | ".join(f"{by_kind[k]:.1f}" for k in kinds) + " |")
    print(f"| all {len(jvms)} | {sum(totals.values()):.1f} | " + " | ".join(f"{totals[k]:.1f}" for k in kinds) + " |")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
