"""Adapter for outbound webhooks: URL and address guard, Standard Webhooks signing, one HTTP
attempt with httpx. The only module that talks to webhook receivers.

Contract (Standard Webhooks, https://www.standardwebhooks.com/):

- `POST <url>` with the stored body bytes and headers `webhook-id` (= event id),
  `webhook-timestamp` (Unix seconds), `webhook-signature` (`v1,<base64 HMAC-SHA256>` over
  `id.timestamp.body`, space-separated when a rotated secret is still in its grace period),
  `webhook-event-type`, `content-type: application/json`.
- Secrets are Standard Webhooks secrets: `whsec_` + base64 of 24–64 random bytes; the HMAC key
  is the decoded bytes.
- SSRF guard on every attempt (a receiver URL must never reach the service's own network):
  https only, no userinfo, no fragment; the host is resolved once (`resolve`, patchable in
  tests), and the attempt is refused as `blocked_destination` if ANY address is loopback, private, link-local, CGNAT, multicast,
  reserved, documentation, benchmarking, unspecified, unique-local or an IPv4-mapped / NAT64 /
  6to4 form of one. The connection then goes to a checked address with the Host header and TLS
  SNI kept as the hostname and the certificate verified against the hostname; there is no
  second lookup, no proxy from the environment and no redirect following.
  `CARDLOOP_WEBHOOK_ALLOW_PRIVATE` (tests only) lifts the address check and nothing else.
- Limits: body ≤ 256 KiB, response read ≤ 16 KiB; the destination's timeout applies to every
  network operation (connect, TLS, send, each read), and reading the response stops once the
  attempt has used up that timeout in total.
"""

from __future__ import annotations

import base64
import binascii
import concurrent.futures
import email.utils
import enum
import functools
import hashlib
import hmac
import ipaddress
import logging
import queue
import re
import secrets as pysecrets
import socket
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

import certifi
import httpx
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from plumbing.parsers import ascii_int

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 1024
MAX_RESPONSE_BYTES = 16 * 1024
RETRY_AFTER_CAP_S = 3600.0
USER_AGENT = "Cardloop-Webhook/1"
SECRET_PREFIX = "whsec_"  # noqa: S105 - the Standard Webhooks prefix
SECRET_MIN_BYTES = 24
SECRET_MAX_BYTES = 64

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


class Outcome(enum.StrEnum):
    """What one attempt came to (stored in `WebhookAttempt.outcome`)."""

    DELIVERED = "delivered"  # 2xx
    RETRYABLE_STATUS = "retryable_status"  # 408, 429, 5xx
    REJECTED = "rejected"  # other 4xx (and 1xx): permanent
    GONE = "gone"  # 410: permanent, disables the destination
    REDIRECT_REFUSED = "redirect_refused"  # 3xx: never followed, permanent
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"  # DNS, connect, TLS, protocol errors
    BLOCKED = "blocked_destination"  # SSRF guard refused the addresses: permanent
    INVALID_DESTINATION = "invalid_destination"  # URL not acceptable: permanent
    BODY_TOO_LARGE = "body_too_large"  # > 256 KiB: permanent
    NO_SECRET = "no_secret"  # noqa: S105 - destination has no signing secret: permanent
    INTERRUPTED = "interrupted"  # worker shut down mid-attempt: back to pending


#: Outcomes that schedule another attempt (full-jitter backoff, Retry-After floor).
RETRYABLE_OUTCOMES = frozenset({Outcome.RETRYABLE_STATUS, Outcome.TIMEOUT, Outcome.NETWORK_ERROR})


#: Why a URL or address is refused, by code: English templates with named placeholders (the
#: msgids of their translations). `DestinationRefused` renders them in English for logs and
#: attempt rows (`str(exc)`) and in the reader's language where they are shown (`message()`).
REFUSALS: dict[str, str] = {
    "not_a_url": gettext_noop("not a valid URL"),
    "bad_port": gettext_noop("the port must be 1 to 65535"),
    "not_https": gettext_noop("the URL must use https"),
    "userinfo": gettext_noop("the URL must not contain a user"),
    "fragment": gettext_noop("the URL must not have a fragment"),
    "no_host": gettext_noop("the URL has no host"),
    "single_label": gettext_noop(
        "%(host)s is a single-label name (it would resolve through this server's own search "
        "domains); use a fully qualified name"
    ),
    "localhost": gettext_noop("%(host)s is a loopback name"),
    "no_address": gettext_noop("the host resolved to no address"),
    "unparseable_address": gettext_noop("unparseable address %(address)s"),
    "blocked_address": gettext_noop("%(address)s is %(kind)s"),
}

#: The `kind` of a `blocked_address` refusal, by `address_block_reason` code.
ADDRESS_KINDS: dict[str, str] = {
    "loopback": gettext_noop("a loopback address"),
    "private": gettext_noop("a private address"),
    "link_local": gettext_noop("a link-local address"),
    "cgnat": gettext_noop("a shared (CGNAT) address"),
    "multicast": gettext_noop("a multicast address"),
    "reserved": gettext_noop("a reserved address"),
    "documentation": gettext_noop("a documentation address"),
    "benchmarking": gettext_noop("a benchmarking address"),
    "unspecified": gettext_noop("the unspecified address"),
    "unique_local": gettext_noop("a unique-local address"),
}


class DestinationRefused(Exception):
    """The URL or its addresses are not an acceptable webhook target.

    `outcome` is Outcome.INVALID_DESTINATION (URL shape) or Outcome.BLOCKED (address class or
    a name of the local network); `code` is a key of REFUSALS and `params` its placeholders
    (`host`, `address`, `kind` — a key of ADDRESS_KINDS), never secrets. `str(exc)` is the
    reason in English (logs, attempt rows); `message()` the same reason in the active
    language, for the place that shows it (admin form, API answer).
    """

    def __init__(self, outcome: Outcome, code: str, **params: str):
        if code not in REFUSALS:
            raise ValueError(f"unknown refusal code {code!r}")
        self.outcome = outcome
        self.code = code
        self.params = params
        super().__init__(self._render(str))

    def message(self) -> str:
        """The reason in the active language (gettext; English when no catalogue matches)."""
        return self._render(gettext)

    def _render(self, translate) -> str:
        params = dict(self.params)
        if "kind" in params:
            params["kind"] = translate(ADDRESS_KINDS[params["kind"]])
        return translate(REFUSALS[self.code]) % params


# ---------------------------------------------------------------------------------------------
# Addresses
# ---------------------------------------------------------------------------------------------

_V4_BLOCKS: list[tuple[ipaddress.IPv4Network, str]] = [
    (ipaddress.IPv4Network(net), reason)
    for net, reason in [
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link_local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "reserved"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    ]
]
_V6_BLOCKS: list[tuple[ipaddress.IPv6Network, str]] = [
    (ipaddress.IPv6Network(net), reason)
    for net, reason in [
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("64:ff9b:1::/48", "private"),  # local-use NAT64
        ("100::/64", "reserved"),  # discard-only
        ("2001::/23", "reserved"),  # IETF protocol assignments, Teredo
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "reserved"),  # SRv6 SIDs
        ("fc00::/7", "unique_local"),
        ("fe80::/10", "link_local"),
        ("fec0::/10", "link_local"),  # deprecated site-local
        ("ff00::/8", "multicast"),
    ]
]
_V6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def address_block_reason(ip: IP) -> str | None:
    """Why `ip` may not be a webhook target (`loopback`, `private`, `link_local`, `cgnat`,
    `multicast`, `reserved`, `documentation`, `benchmarking`, `unspecified`, `unique_local`),
    or None for a public unicast address.

    IPv4-mapped (`::ffff:a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses are
    judged by the IPv4 address they carry. Other IPv6 outside global unicast (2000::/3) is
    `reserved`. Source: RFC 6890 special-purpose address registries.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "link_local"
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return address_block_reason(embedded)
        for net, reason in _V6_BLOCKS:
            if ip in net:
                return reason
        if ip not in _V6_GLOBAL_UNICAST:
            return "reserved"
        return None
    for net, reason in _V4_BLOCKS:
        if ip in net:
            return reason
    if not ip.is_global:  # backstop for ranges added to the registry later
        return "reserved"
    return None


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Parse the numeric IPv4 forms resolvers accept (`2130706433`, `0x7f.1`, `0177.0.0.1`,
    `127.1`) as the WHATWG URL standard does; None when `host` is not such a form."""
    parts = host.split(".")
    if parts and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4:
        return None
    numbers = []
    for part in parts:
        try:
            if part.lower().startswith("0x"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part[1:], 8))
            elif part.isdigit():
                numbers.append(int(part, 10))
            else:
                return None
        except ValueError:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def literal_address(host: str) -> IP | None:
    """The IP address a URL host denotes without DNS (IPv6 literal, dotted or legacy numeric
    IPv4), or None for a DNS name."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host.replace("%25", "%"))
    except ValueError:
        return _legacy_ipv4(host)


def resolve(host: str, port: int) -> list[str]:
    """All addresses of `host` (one DNS lookup, resolver order, duplicates removed).

    Raises OSError (socket.gaierror) when the name does not resolve. Tests patch this function.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        seen.setdefault(sockaddr[0], None)
    return list(seen)


def check_addresses(addresses: list[str]) -> list[IP]:
    """Parse and check resolved addresses; raises DestinationRefused(BLOCKED) when the list is
    empty, unparseable or ANY address is blocked (a mixed answer is refused as a whole)."""
    if not addresses:
        raise DestinationRefused(Outcome.BLOCKED, "no_address")
    checked: list[IP] = []
    for raw in addresses:
        try:
            ip = ipaddress.ip_address(raw)
        except ValueError:
            raise DestinationRefused(
                Outcome.BLOCKED, "unparseable_address", address=repr(raw)
            ) from None
        reason = address_block_reason(ip)
        if reason:
            raise DestinationRefused(
                Outcome.BLOCKED, "blocked_address", address=str(ip), kind=reason
            )
        checked.append(ip)
    return checked


#: One label of a host name in its ASCII (`xn--`) form: letters, digits and hyphens, 1–63
#: characters, no hyphen first or last (RFC 1123 §2.1, RFC 952).
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)", re.IGNORECASE)
#: Whitespace or control characters anywhere in the URL as typed (RFC 3986 §2 admits neither).
_BAD_URL_CHARACTER = re.compile(r"[\x00-\x20\x7f]")


def is_host_name(raw_host: str) -> bool:
    """True when `raw_host` (ASCII form, e.g. httpx's `raw_host` decoded) is a syntactically
    valid DNS host name: dot-separated labels per `_HOST_LABEL`, at most 253 characters, one
    optional trailing dot. `exa mple.com`, `..example.com` and `exa_mple.com` are not."""
    name = raw_host[:-1] if raw_host.endswith(".") else raw_host
    if not name or len(name) > 253:
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


def parse_url(url: str) -> httpx.URL:
    """Parse a destination URL; raises DestinationRefused(INVALID_DESTINATION) unless it is
    `https://host[:port]/…` with no userinfo and no fragment, no whitespace or control
    character, a host that is an address literal or a valid host name (`is_host_name`, after
    IDNA: `xn--` names are decoded lazily by httpx, so `.host` itself can raise) and a port
    in 1–65535 (the resolver would silently take 99999 modulo 65536)."""
    if not isinstance(url, str) or _BAD_URL_CHARACTER.search(url):
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "not_a_url")
    try:
        parsed = httpx.URL(url)
        host = parsed.host
        raw_host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, TypeError, ValueError):  # IDNAError is a ValueError
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "not_a_url") from None
    if host and literal_address(host) is None and not is_host_name(raw_host):
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "not_a_url")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "bad_port")
    if parsed.scheme != "https":
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "not_https")
    if parsed.userinfo:
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "userinfo")
    if parsed.fragment or "#" in url:
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "fragment")
    if not host:
        raise DestinationRefused(Outcome.INVALID_DESTINATION, "no_host")
    return parsed


@functools.lru_cache(maxsize=1024)
def _parsed_url(url: str) -> httpx.URL:
    """`parse_url(url)`, remembered per URL text for the attempts of a worker process
    (parsing and rebuilding the URL cost about 50 µs of CPU an attempt, as much as signing
    it several times over). A refused URL raises on every attempt (exceptions are not
    cached). Only the URL's shape is remembered: its host is resolved and its addresses
    checked on every attempt, as before."""
    return parse_url(url)


@functools.lru_cache(maxsize=1024)
def _url_at(url: httpx.URL, address: str) -> httpx.URL:
    """`url` with its host replaced by the checked `address` (where the connection goes; Host
    and SNI stay the hostname), remembered like `_parsed_url`."""
    return url.copy_with(host=address)


def check_registration_url(url: str, *, allow_private: bool | None = None) -> None:
    """The one registration rule of a destination URL, used wherever a destination is saved
    (`feedback.destinations.validate_destination`: the admin form and `save_destination`).

    Refuses what `parse_url` refuses and, unless `allow_private` (default: the
    `CARDLOOP_WEBHOOK_ALLOW_PRIVATE` setting), a literal address in a blocked class (also the
    numeric forms `2130706433`, `0x7f.1`, `[::ffff:127.0.0.1]`), `localhost` names and
    single-label names (`https://receiver/`: a name without a dot is completed by the
    resolver's search domains — it names a host of the server's own network, never a public
    receiver; see the IAB statement "Dotless Domains Considered Harmful",
    https://www.iab.org/documents/correspondence-reports-documents/2013-2/iab-statement-dotless-domains-considered-harmful/).
    Names are checked again, after resolution, on every attempt. Raises DestinationRefused.
    """
    parsed = parse_url(url)
    if allow_private is None:
        allow_private = settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE
    if allow_private:
        return
    host = parsed.host.rstrip(".").lower()
    ip = literal_address(host)
    if ip is not None:
        reason = address_block_reason(ip)
        if reason:
            raise DestinationRefused(
                Outcome.BLOCKED, "blocked_address", address=str(ip), kind=reason
            )
    elif host == "localhost" or host.endswith(".localhost"):
        raise DestinationRefused(Outcome.BLOCKED, "localhost", host=host)
    elif "." not in host:
        raise DestinationRefused(Outcome.BLOCKED, "single_label", host=host)


# ---------------------------------------------------------------------------------------------
# Secrets and signatures
# ---------------------------------------------------------------------------------------------


def generate_secret() -> str:
    """A new Standard Webhooks secret: `whsec_` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(pysecrets.token_bytes(32)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a secret (`whsec_<base64>` or bare base64); raises ValueError when it is
    not base64 of 24–64 bytes (Standard Webhooks' recommended range)."""
    body = secret.strip()
    if body.startswith(SECRET_PREFIX):
        body = body[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the secret must be whsec_ followed by base64") from None
    if not SECRET_MIN_BYTES <= len(key) <= SECRET_MAX_BYTES:
        raise ValueError(
            f"the secret must encode {SECRET_MIN_BYTES}–{SECRET_MAX_BYTES} bytes, not {len(key)}"
        )
    return key


def normalize_secret(secret: str) -> str:
    """A pasted secret in canonical `whsec_<base64>` form; raises ValueError (see secret_key)."""
    return SECRET_PREFIX + base64.b64encode(secret_key(secret)).decode("ascii")


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256(key, f"{msg_id}.{timestamp}." + body)>`."""
    mac = hmac.new(secret_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def signature_header(secrets: list[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: one `v1,` signature per secret, space-separated (the
    current secret first; a rotated one while its grace period lasts)."""
    return " ".join(sign(s, msg_id, timestamp, body) for s in secrets)


def verify_signature(secret: str, msg_id: str, timestamp: str, body: bytes, header: str) -> bool:
    """True when any `v1,` signature in `header` matches; never raises (missing, empty,
    non-ASCII, odd-length or otherwise malformed input is simply False). Constant-time
    comparison (`hmac.compare_digest`, so timing does not leak how much of a guess matched).
    Does not check timestamp freshness."""
    try:
        if not isinstance(header, str) or not header or not timestamp.isdigit():
            return False
        expected = sign(secret, msg_id, int(timestamp), body).encode("ascii")
        ok = False
        for candidate in header.split(" "):
            ok |= hmac.compare_digest(expected, candidate.encode("utf-8"))
        return ok
    except (ValueError, TypeError, UnicodeError):
        return False


# ---------------------------------------------------------------------------------------------
# Retry-After
# ---------------------------------------------------------------------------------------------


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a `Retry-After` value: delay-seconds or an HTTP date (relative to
    `now`), capped at one hour, never negative. None when absent; None and a warning in the
    log when malformed (the normal backoff applies). Source: RFC 9110 §10.2.3."""
    if value is None:
        return None
    text = value.strip()
    seconds = ascii_int(text, max_digits=12)
    if seconds is not None:
        return min(float(seconds), RETRY_AFTER_CAP_S)
    if text.isascii() and text.isdigit():  # delay-seconds, but absurdly long
        return RETRY_AFTER_CAP_S
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        when = None
    if when is None or when.tzinfo is None:
        log.warning("ignoring malformed Retry-After header %r", text[:64])
        return None
    return min(max((when - now).total_seconds(), 0.0), RETRY_AFTER_CAP_S)


# ---------------------------------------------------------------------------------------------
# Attempts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookRequest:
    """One attempt to make: where, what (stored body bytes) and how to sign it.

    `secrets`: current secret first, then a rotated one still in grace (may be empty → the
    attempt fails with NO_SECRET). `timeout_s`: total deadline of the attempt.
    """

    url: str
    event_id: str
    event_type: str
    body: bytes
    secrets: tuple[str, ...]
    timeout_s: float = 10.0


@dataclass
class AttemptResult:
    """What happened: `outcome`, HTTP `status_code` (None without a response), a short
    `error` (no secrets), the first 16 KiB of the response (`response_excerpt`, text),
    `retry_after_s` (parsed Retry-After), timing, and for a refused target the
    `DestinationRefused` (`refusal`, to show its reason in the reader's language)."""

    outcome: Outcome
    status_code: int | None = None
    error: str = ""
    response_excerpt: str = ""
    retry_after_s: float | None = None
    started_at: datetime = field(default_factory=timezone.now)
    duration_ms: int = 0
    refusal: DestinationRefused | None = None


def classify_status(status: int) -> Outcome:
    """2xx delivered; 408/429/5xx retry; 410 gone; 3xx redirect refused; other → rejected."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in (408, 429) or 500 <= status < 600:
        return Outcome.RETRYABLE_STATUS
    if status == 410:
        return Outcome.GONE
    if 300 <= status < 400:
        return Outcome.REDIRECT_REFUSED
    return Outcome.REJECTED


def _ssl_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certifi.where())
    extra = getattr(settings, "CARDLOOP_WEBHOOK_CA_FILE", "")
    if extra:
        ctx.load_verify_locations(cafile=str(extra))
    return ctx


class WebhookSender:
    """Runs webhook attempts on a pool of daemon threads, so a worker can keep many attempts
    in flight and leave at shutdown without waiting for a hung receiver.

    `submit(request) -> concurrent.futures.Future[AttemptResult]` (thread-safe; `cancel()`
    works until the attempt starts), `send(request) -> AttemptResult` (blocking), `close()`.
    Each thread has its own httpx clients, one per (hostname, checked address, port), so a
    connection made with one hostname's SNI is never reused for another hostname.

    Why threads and sync httpx: httpx's async connection pool slows down sharply with many
    concurrent requests (encode/httpx#3215); measured on the benchmark machine, 16 requests in
    flight through one AsyncClient ran at about a seventh of the rate of 16 threads.
    """

    MAX_CLIENTS_PER_THREAD = 64

    def __init__(self, *, threads: int = 16):
        self._ssl = _ssl_context()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._local = threading.local()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._run, name=f"webhook-sender-{n}", daemon=True)
            for n in range(max(1, threads))
        ]
        for thread in self._threads:
            thread.start()

    # -- public ------------------------------------------------------------------------------

    def submit(self, request: WebhookRequest) -> concurrent.futures.Future:
        """Queue an attempt; returns a Future of AttemptResult (`.result()` never raises
        except CancelledError after a successful `cancel()`)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((future, request))
        return future

    def send(self, request: WebhookRequest) -> AttemptResult:
        """Make one attempt and wait for its result."""
        return self.submit(request).result()

    def close(self, *, wait: float = 1.0) -> None:
        """Stop the threads after their current attempt; waits at most `wait` seconds in
        total (threads still busy are daemons and die with the process). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + wait
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- threads -----------------------------------------------------------------------------

    def _run(self) -> None:
        self._local.clients = OrderedDict()
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                future, request = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(self.attempt(request))
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting worker
                    future.set_exception(exc)
        finally:
            for client in self._local.clients.values():
                client.close()

    def _client(self, host: str, address: str, port: int) -> httpx.Client:
        clients: OrderedDict = self._local.clients
        key = (host, address, port)
        client = clients.get(key)
        if client is None:
            client = httpx.Client(
                verify=self._ssl,
                trust_env=False,  # no proxy from the environment: it would bypass pinning
                follow_redirects=False,
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            )
            clients[key] = client
            while len(clients) > self.MAX_CLIENTS_PER_THREAD:
                _key, old = clients.popitem(last=False)
                old.close()
        else:
            clients.move_to_end(key)
        return client

    # -- one attempt -------------------------------------------------------------------------

    def attempt(self, request: WebhookRequest) -> AttemptResult:
        """One attempt: guard, resolve once, sign, POST, classify. Never raises."""
        started_at = timezone.now()
        t0 = time.monotonic()
        try:
            result = self._attempt(request, deadline=t0 + request.timeout_s)
        except DestinationRefused as exc:
            result = AttemptResult(exc.outcome, error=f"{exc.outcome}: {exc}", refusal=exc)
        except (TimeoutError, httpx.TimeoutException):
            result = AttemptResult(
                Outcome.TIMEOUT, error=f"no answer within {request.timeout_s:g} s"
            )
        except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
            result = AttemptResult(Outcome.NETWORK_ERROR, error=_describe(exc))
        except Exception as exc:  # noqa: BLE001 - a bug must not lose the row: retry later
            log.exception("webhook attempt crashed")
            result = AttemptResult(
                Outcome.NETWORK_ERROR, error=f"internal error: {type(exc).__name__}"
            )
        result.started_at = started_at
        result.duration_ms = int((time.monotonic() - t0) * 1000)
        return result

    def _attempt(self, request: WebhookRequest, *, deadline: float) -> AttemptResult:
        url = _parsed_url(request.url)
        if len(request.body) > MAX_BODY_BYTES:
            return AttemptResult(
                Outcome.BODY_TOO_LARGE,
                error=f"body is {len(request.body)} bytes; the limit is {MAX_BODY_BYTES}",
            )
        if not request.secrets:
            return AttemptResult(Outcome.NO_SECRET, error="the destination has no secret")
        hostname = url.raw_host.decode("ascii")
        port = url.port or 443
        literal = literal_address(hostname)
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = resolve(hostname, port)
            except OSError as exc:
                return AttemptResult(Outcome.NETWORK_ERROR, error=f"DNS: {_describe(exc)}")
        if settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE:
            checked = [ipaddress.ip_address(a) for a in addresses]
            if not checked:
                raise DestinationRefused(Outcome.BLOCKED, "no_address")
        else:
            checked = check_addresses(addresses)
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",  # the 16 KiB excerpt is read raw, never inflated
            "user-agent": USER_AGENT,
            "host": url.netloc.decode("ascii"),
            "webhook-id": request.event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature_header(
                list(request.secrets), request.event_id, timestamp, request.body
            ),
            "webhook-event-type": request.event_type,
        }
        for index, address in enumerate(checked):
            try:
                return self._post(url, hostname, port, str(address), headers, request, deadline)
            except httpx.ConnectError:
                if index == len(checked) - 1 or time.monotonic() >= deadline:
                    raise
        raise AssertionError("unreachable")

    def _post(
        self,
        url: httpx.URL,
        hostname: str,
        port: int,
        address: str,
        headers: dict[str, str],
        request: WebhookRequest,
        deadline: float,
    ) -> AttemptResult:
        """POST to the checked `address`, Host and SNI kept as `hostname`, no redirects.

        Every network operation has the destination's timeout, and reading the response
        stops at the attempt's deadline or after 16 KiB.
        """
        remaining = max(0.05, deadline - time.monotonic())
        client = self._client(hostname, address, port)
        with client.stream(
            "POST",
            _url_at(url, address),
            content=request.body,
            headers=headers,
            timeout=httpx.Timeout(remaining),
            extensions={"sni_hostname": hostname},
        ) as response:
            excerpt = bytearray()
            for chunk in response.iter_raw():
                excerpt += chunk
                if len(excerpt) >= MAX_RESPONSE_BYTES or time.monotonic() >= deadline:
                    break
            status = response.status_code
        outcome = classify_status(status)
        retry_after = None
        if outcome is Outcome.RETRYABLE_STATUS:
            retry_after = parse_retry_after(response.headers.get("retry-after"), timezone.now())
        error = "" if outcome is Outcome.DELIVERED else f"HTTP {status}"
        if outcome is Outcome.REDIRECT_REFUSED:
            error = f"HTTP {status}: redirects are not followed"
            location = response.headers.get("location")
            if location:
                error += f" (Location: {_clip(location, MAX_LOCATION_CHARS)})"
        return AttemptResult(
            outcome,
            status_code=status,
            error=error,
            response_excerpt=bytes(excerpt[:MAX_RESPONSE_BYTES]).decode("utf-8", errors="replace"),
            retry_after_s=retry_after,
        )


#: Characters of a refused redirect's `Location` kept in the attempt log (the error column
#: holds 500).
MAX_LOCATION_CHARS = 300


def _clip(text: str, limit: int) -> str:
    """`text` for the attempt log: control characters escaped, at most `limit` characters
    (an ellipsis marks a cut)."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
