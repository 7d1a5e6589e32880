"""`bench/verdict.py`: a bench prints every target row with its verdict and exits 1 when one
is missed (0 with `--no-targets`)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _verdict():
    spec = importlib.util.spec_from_file_location("verdict", ROOT / "bench" / "verdict.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("verdict", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_missed_row_is_printed_with_the_met_ones_and_fails_the_run(capsys):
    verdict = _verdict()
    verdicts = verdict.Verdicts("demo")
    verdicts.check("throughput ratio", 0.71, ">= 0.75", 0.71 >= 0.75)
    verdicts.check("failed answers", 0, "0", True)
    verdicts.report()
    out = capsys.readouterr().out
    assert "throughput ratio" in out and "0.71" in out and "MISSED" in out
    assert "failed answers" in out and "met" in out
    assert "1 of 2 met; missed: throughput ratio" in out
    assert verdicts.exit_status() == 1
    assert verdicts.exit_status(no_targets=True) == 0


def test_all_met_exits_zero_and_the_flag_parses():
    verdict = _verdict()
    verdicts = verdict.Verdicts("demo")
    verdicts.check("duplicates", 0, "0", True)
    assert verdicts.exit_status() == 0
    parser = argparse.ArgumentParser()
    verdict.add_argument(parser)
    assert parser.parse_args(["--no-targets"]).no_targets is True
