"""A command's Spark Connect session: its client loads without IPython (whose import pyspark's
client makes, when it is installed, for a progress bar mvlog never shows), and IPython still
imports afterwards, for whoever needs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

IN_A_NEW_PROCESS = """
import sys
from mvlog.config import SparkConfig
from mvlog.spark.session import connect_session
spark = connect_session(sys.argv[1], SparkConfig())
assert spark.sql("SELECT 1 AS one").collect()[0].one == 1
print("IPython" in sys.modules)
import IPython
print(IPython.get_ipython() is None)
"""


def test_a_connect_session_loads_its_client_without_ipython_which_still_imports_after(connect_engine):
    # IPython is installed with the test extras (ipykernel, for the notebooks' tests).
    done = subprocess.run([sys.executable, "-c", IN_A_NEW_PROCESS, connect_engine.remote],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]
