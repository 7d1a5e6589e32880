"""`python -m cardloop.webserver <daphne arguments>`: Daphne with an access log that leaves out
query strings (and without Twisted's, which keeps them: `QuietHTTPFactory`), requests whose
bodies Twisted does not parse as forms (`FormlessWebRequest`), the loaded application frozen
out of the garbage collector's scans (`CommandLine`), and TCP writes sent at once when nothing
is queued (`send_at_once`). `manage.py serve` starts the web process through it.

Daphne's access log writes each request's full URI. Query strings can carry operator ids
(`GET /api/v1/desktop-tokens?open_id=ou_…`) and other caller data, which Cardloop never logs
(project rule: no secrets, callback tokens, operator ids or comment text in logs), so the
logged path keeps only the path and shows `?…` where a query string was. Run this module
instead of `python -m daphne` behind a load balancer too; its arguments are Daphne's.
"""

from __future__ import annotations

import gc
from typing import Any

from daphne import cli, http_protocol, server
from daphne.access import AccessLogGenerator
from twisted.internet import tcp


class QuerylessAccessLog(AccessLogGenerator):
    """Daphne's access log with the query string of each logged path replaced by `?…`."""

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        path = details.get("path")
        if isinstance(path, str) and "?" in path:
            details = {**details, "path": path.split("?", 1)[0] + "?…"}
        super().__call__(protocol, action, details)


class FormlessWebRequest(http_protocol.WebRequest):
    """Daphne's request, made with Twisted's `parsePOSTFormSubmission=False`.

    By default Twisted's `http.Request` parses the Content-Type of every POST with a body
    through the `email` package and, for form types, the whole body into `request.args`
    (Twisted API docs, `twisted.web.http.Request.__init__`: "parse MIME multipart and
    URL-encoded body uploads into request.args. This can use large amounts of memory for
    large uploads"). Daphne never reads `request.args`: the ASGI application gets the raw
    body. So that work is skipped: it was about a sixth of the event loop's time for each
    Feishu callback (`application/json; charset=utf-8`, a py-spy profile at 32 concurrent
    clicks; bench/README.md), and a large form upload is no longer held in memory twice."""

    def __init__(self, *args, **kwargs):
        kwargs["parsePOSTFormSubmission"] = False
        super().__init__(*args, **kwargs)


class QuietHTTPFactory(http_protocol.HTTPFactory):
    """Daphne's HTTP factory without Twisted's own access line.

    Twisted's `HTTPFactory.log` formats a combined-log line with the full URI (query string
    included) for every request and writes it to Twisted's log (Twisted API docs,
    `twisted.web.http.HTTPFactory.log`); Daphne discards that log at its default verbosity and
    hands it to Python logging at `-v 2`, where a query string's operator id would be
    written. Daphne's access log (`QuerylessAccessLog`) is the one Cardloop keeps."""

    def log(self, request) -> None:
        """Nothing: see the class."""


class CommandLine(cli.CommandLineInterface):
    """Daphne's command line, which moves everything loading the application created out of
    the garbage collector's sight once it is loaded (`gc.freeze()`).

    Loading the application (Django, lark-oapi, DRF, Channels) leaves about 430 000 objects
    that live as long as the process. Python's oldest-generation collection scans all of
    them every time it runs: 270–350 ms with the GIL held, a few times a minute under load,
    during which the process answers nothing (measured at 32 concurrent callbacks: it alone
    put the callbacks' p99 past 550 ms; bench/README.md). `gc.freeze()` moves them to the
    permanent generation, which no collection scans (Python docs); what requests allocate
    is collected as before. The price: a frozen object that later ends up in a reference
    cycle is never freed (module-level state, so a handful at most).

    Then the collector's thresholds become `GC_THRESHOLDS`: what serving creates that lives
    on (a thousand panel connections are a few hundred thousand objects) is still scanned by
    every oldest-generation collection, and with Python's defaults (700, 10, 10) those ran
    every few seconds while asks went out to 1000 panels, 100–290 ms each with the GIL held
    (measured with a `gc.callbacks` probe; one of them inside an ask made it 3× slower).
    A young generation of 50 000 allocations lets most request garbage die by reference
    count before it is ever promoted, and the older generations run 2× and 10× less often:
    during the same asks no oldest-generation collection ran, and a young one took about
    20 ms (Python docs, `gc.set_threshold`; cycles are still collected, later)."""

    def load_asgi_app(self, asgi_app_path: str):
        application = super().load_asgi_app(asgi_app_path)
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        return application


#: `gc.set_threshold` of a web process once the application is loaded (see `CommandLine`):
#: (young-generation allocations, young collections per middle one, middle per oldest).
GC_THRESHOLDS = (50_000, 20, 100)


_buffered_write = tcp.Connection.write


def _write_at_once(self: tcp.Connection, data: bytes) -> None:
    """`tcp.Connection.write`, except that with nothing queued on a plain (not TLS) open
    connection the data goes to the socket now (a non-blocking `send`), as asyncio's own
    transports do; what the kernel does not take, and every write behind queued data, is
    queued and sent by Twisted as before, in order. A failing send leaves the data queued so
    that Twisted's `doWrite` meets the error and drops the connection as it always has."""
    if (
        type(data) is bytes
        and data
        and not self.TLS
        and self.connected
        and not self.disconnecting
        and not self._writeDisconnected
        and not self._tempDataBuffer
        and self.offset == len(self.dataBuffer)
    ):
        sent = self.writeSomeData(data)  # 0 when the socket would block; an error object
        if not isinstance(sent, Exception):
            if sent == len(data):
                return
            data = data[sent:]
    _buffered_write(self, data)


def send_at_once() -> None:
    """Make Twisted's TCP connections send a write at once when nothing is queued
    (`_write_at_once`) instead of queueing it and asking the event loop to say when the
    socket is writable. Twisted always queues: each WebSocket frame Daphne sends costs an
    `add_writer` (an `epoll_ctl`), a writable callback through Twisted's logging context on
    the next loop pass, the `send`, and a `remove_writer` (another `epoll_ctl`). With 1000
    question panels of one user that was about half of Daphne's event loop per push
    (py-spy; bench/README.md "Panel fan-out"); only the `send` is left. Idempotent."""
    tcp.Connection.write = _write_at_once


def main() -> None:
    """Run Daphne's command line (`CommandLine`) with `QuerylessAccessLog` as its access
    logger, `FormlessWebRequest` as its request class, `QuietHTTPFactory` as its HTTP
    factory and TCP writes sent at once (`send_at_once`)."""
    send_at_once()
    # Daphne's CLI builds its logger, and its HTTP factory each connection's requests, from
    # these module-level names; there is no setting for either.
    cli.AccessLogGenerator = QuerylessAccessLog
    http_protocol.WebRequest = FormlessWebRequest
    server.HTTPFactory = QuietHTTPFactory
    CommandLine.entrypoint()


if __name__ == "__main__":
    main()
