"""`bench/panel_fanout.py`: the side-by-side mode measures both shapes in one run and prints
their p99 ratio as a target row; several processes are refused without Redis. What it
measures is not asserted here (speed figures live in bench/README.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "panel_fanout.py"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return {**env, "NO_PROXY": "127.0.0.1,localhost", **extra}


def test_several_processes_without_redis_are_refused_before_anything_starts():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--processes", "2", "--panels", "4", "--users", "4"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--processes > 1 needs REDIS_URL" in done.stderr
    assert "panels connected" not in done.stdout


@pytest.mark.bench
def test_side_by_side_prints_both_shapes_and_their_ratio_as_a_target_row(tmp_path):
    database = f"sqlite:///{tmp_path / 'panels.sqlite3'}"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--side-by-side", "--panels", "12", "--asks", "2"]
        + ["--max-seconds", "120", "--no-targets"],
        cwd=ROOT,
        env=_env(DATABASE_URL=database),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "13 panels connected" in out
    assert "asks to a user with 1 panel(s): 2" in out
    assert "asks to a user with 12 panel(s): 2" in out
    assert re.search(r"ask -> each panel\s+n=\s+24 ", out)  # 2 asks × 12 panels
    row = re.search(r"ask p99: 12 panels ÷ 1 panel \(same run\)\s+([0-9.]+)\s+target <= 5", out)
    assert row and float(row.group(1)) > 0
    assert re.search(r"duplicate frames\s+0\s+target 0\s+met", out)
