"""Two `mvlog schedule` processes on one catalog share the work: no view is refreshed by both at
once, and when the one in the middle of a refresh is killed (SIGKILL), the other takes the view
over within a few intervals; nothing is lost or applied twice (the oracle), while writers write."""

from __future__ import annotations

import pytest
from schedulers import two_schedulers_and_a_sigkill

pytestmark = pytest.mark.integration


def test_two_schedulers_share_the_views_and_survive_a_sigkill(db, tmp_path, connect_engine):
    two_schedulers_and_a_sigkill(db, tmp_path, str(tmp_path / "wh"), {"remote": connect_engine.remote})
