"""`python -m botadmin.webserver <daphne arguments>`: Daphne with an access log that leaves out
query strings. `manage.py serve` starts the web process through it.

Daphne's access log writes each request's full URI. Query strings can carry operator ids
(`GET /api/v1/desktop-tokens?open_id=ou_…`) and other caller data, which Cardloop never logs
(project rule: no secrets, callback tokens, operator ids or comment text in logs), so the
logged path keeps only the path and shows `?…` where a query string was. Run this module
instead of `python -m daphne` behind a load balancer too; its arguments are Daphne's.

It also shortens the GIL switch interval (`CARDLOOP_GIL_SWITCH_INTERVAL`, see
`gil_switch_interval`), which the Feishu callbacks' database round trips need.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from daphne import cli
from daphne.access import AccessLogGenerator


class QuerylessAccessLog(AccessLogGenerator):
    """Daphne's access log with the query string of each logged path replaced by `?…`."""

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        path = details.get("path")
        if isinstance(path, str) and "?" in path:
            details = {**details, "path": path.split("?", 1)[0] + "?…"}
        super().__call__(protocol, action, details)


#: Default of `CARDLOOP_GIL_SWITCH_INTERVAL` (milliseconds).
DEFAULT_GIL_SWITCH_INTERVAL_MS = 0.5


def gil_switch_interval() -> float:
    """Seconds a thread may hold the GIL while another waits for it (`sys.setswitchinterval`),
    from `CARDLOOP_GIL_SWITCH_INTERVAL` in milliseconds (default 0.5; Python's own is 5).

    A callback makes about fifteen database round trips; after each one its thread needs the
    GIL back, and with Python's 5 ms interval it waited behind whichever thread was computing
    (the event loop, another click) — the convoy effect. Raises ValueError for a value that is
    not a positive number."""
    raw = os.environ.get("CARDLOOP_GIL_SWITCH_INTERVAL", "") or str(DEFAULT_GIL_SWITCH_INTERVAL_MS)
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(
            f"CARDLOOP_GIL_SWITCH_INTERVAL must be a positive number of ms, not {raw!r}"
        )
    return value / 1000


def main() -> None:
    """Run Daphne's command line with `QuerylessAccessLog` as its access logger and the GIL
    switch interval of `gil_switch_interval()` (exits with a message when it is invalid)."""
    # Daphne's CLI builds its logger from this module-level name; there is no setting for it.
    cli.AccessLogGenerator = QuerylessAccessLog
    try:
        sys.setswitchinterval(gil_switch_interval())
    except ValueError as exc:
        sys.exit(f"cardloop web server: {exc}")
    cli.CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
