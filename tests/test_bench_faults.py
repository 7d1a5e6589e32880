"""`bench/faults.py --quick`: the fault bench runs end to end against a live `manage.py serve`
on SQLite and prints a markdown row and JSON whose figures are numbers. What it measures is
not asserted here (speed and fault figures live in bench/README.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.bench

COLUMNS = [
    "scenario",
    "database",
    "clicks sent",
    "acknowledged",
    "recorded",
    "lost",
    "duplicated",
    "recorded by retry",
    "webhooks once / twice / missing",
    "HTTP 500",
    "normal answers after (s)",
    "/readyz in fault max / p50 (ms)",
    "/readyz in fault answers",
    "card updates left",
]


def test_quick_worker_kill_prints_a_row_of_numbers_and_json(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    command = [
        sys.executable,
        str(ROOT / "bench" / "faults.py"),
        "--quick",
        "--scenarios",
        "worker_kill",
        "--rate",
        "5",
        "--settle",
        "10",
        "--port",
        "0",
        "--sqlite",
        str(tmp_path / "faults.sqlite3"),
        "--json",
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = "| " + " | ".join(COLUMNS) + " |"
    assert header in lines
    rows = [line for line in lines if line.startswith("| worker_kill |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert len(cells) == len(COLUMNS)
    named = dict(zip(COLUMNS, cells, strict=True))
    assert named["database"] == "sqlite"
    sent = int(named["clicks sent"])
    assert sent > 0
    for column in ("acknowledged", "recorded", "lost", "duplicated", "HTTP 500"):
        assert 0 <= int(named[column]) <= sent, column
    assert re.fullmatch(r"\d+ of \d+", named["recorded by retry"])
    assert re.fullmatch(r"\d+ / \d+ / \d+", named["webhooks once / twice / missing"])
    assert re.fullmatch(r"\d+(\.\d+)?|never", named["normal answers after (s)"])
    assert re.fullmatch(r"(\d+|never) / (\d+|never)", named["/readyz in fault max / p50 (ms)"])
    int(named["card updates left"])

    report = json.loads(done.stdout[done.stdout.index("\n{") + 1 :])
    (result,) = report["results"]
    assert result["scenario"] == "worker_kill"
    assert result["clicks_sent"] == sent
    assert result["lost"] == int(named["lost"])
