"""Targets and verdicts of the benchmark scripts: every row printed with what it was measured
against and whether it met it, never a subset, and the script's exit status 1 when any row
missed (0 with `--no-targets`, for a run that only records figures).

    verdicts = Verdicts("callback load")
    verdicts.check("c=32 throughput ÷ /healthz", 0.71, ">= 0.75", 0.71 >= 0.75)
    verdicts.report()          # prints the table
    sys.exit(verdicts.exit_status(no_targets=args.no_targets))
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Verdicts:
    """The rows of one bench run: `(what, measured, target, met)`; `measured` and `target`
    are shown as given (numbers are formatted with `fmt`)."""

    title: str
    rows: list[tuple[str, str, str, bool]] = field(default_factory=list)

    def check(self, what: str, measured, target: str, met: bool, *, fmt: str = "{:.2f}") -> bool:
        """Record one row; returns `met`."""
        shown = fmt.format(measured) if isinstance(measured, float) else str(measured)
        self.rows.append((what, shown, target, bool(met)))
        return bool(met)

    @property
    def missed(self) -> list[str]:
        return [what for what, _m, _t, met in self.rows if not met]

    def report(self) -> None:
        """Print every row with `met` / `MISSED`, then a one-line total."""
        if not self.rows:
            return
        width = max(len(what) for what, *_ in self.rows)
        print()
        print(f"targets — {self.title}")
        for what, measured, target, met in self.rows:
            print(
                f"  {what:<{width}}  {measured:>10}  target {target:<12} {'met' if met else 'MISSED'}"
            )
        missed = self.missed
        print(
            f"  {len(self.rows) - len(missed)} of {len(self.rows)} met"
            + (f"; missed: {', '.join(missed)}" if missed else "")
        )

    def exit_status(self, *, no_targets: bool = False) -> int:
        """1 when a row missed its target (0 with `no_targets`)."""
        return 0 if no_targets or not self.missed else 1


def add_argument(parser) -> None:
    """The common `--no-targets` flag: report the verdicts but exit 0."""
    parser.add_argument(
        "--no-targets",
        action="store_true",
        help="print every target's verdict but exit 0 even when one is missed",
    )
