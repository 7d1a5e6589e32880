"""`python -m botadmin.webserver <daphne arguments>`: Daphne with an access log that leaves out
query strings. `manage.py serve` starts the web process through it.

Daphne's access log writes each request's full URI. Query strings can carry operator ids
(`GET /api/v1/desktop-tokens?open_id=ou_…`) and other caller data, which Cardloop never logs
(project rule: no secrets, callback tokens, operator ids or comment text in logs), so the
logged path keeps only the path and shows `?…` where a query string was. Run this module
instead of `python -m daphne` behind a load balancer too; its arguments are Daphne's.
"""

from __future__ import annotations

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


def main() -> None:
    """Run Daphne's command line with `QuerylessAccessLog` as its access logger."""
    # Daphne's CLI builds its logger from this module-level name; there is no setting for it.
    cli.AccessLogGenerator = QuerylessAccessLog
    cli.CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
