"""The SSRF guard (no attempt may reach a private, loopback or otherwise special address) and
the signature helpers (constant-time comparisons only).

With CARDLOOP_WEBHOOK_ALLOW_PRIVATE off, the adapter's resolver is patched to answer each
blocked address class: the attempt is refused as `blocked_destination`, no connection is
attempted (a spy on the adapter's only connecting method) and the loopback receiver sees none.
"""

from __future__ import annotations

import ipaddress

import pytest
from standardwebhooks.webhooks import Webhook

from feedback import webhooks
from feedback.models import OutboxItem, WebhookAttempt, WebhookDestination
from feedback.webhooks import AttemptResult, Outcome, address_block_reason

BLOCKED = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("10.0.0.5", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link_local"),
    ("100.64.0.1", "cgnat"),
    ("100.127.255.254", "cgnat"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("192.0.0.8", "reserved"),
    ("192.0.2.10", "documentation"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.10", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.1", "benchmarking"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fd00::1", "unique_local"),
    ("fc00::1", "unique_local"),
    ("fe80::1", "link_local"),
    ("fe80::1%eth0", "link_local"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("100::1", "reserved"),
    ("2001::1", "reserved"),  # Teredo
    ("::127.0.0.1", "reserved"),  # deprecated IPv4-compatible
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::ffff:7f00:1", "loopback"),  # IPv4-mapped, hex form
    ("::ffff:10.0.0.5", "private"),
    ("::ffff:169.254.169.254", "link_local"),
    ("64:ff9b::a00:5", "private"),  # NAT64 of 10.0.0.5
    ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
    ("64:ff9b:1::1", "private"),  # local-use NAT64
    ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
    ("2002:c0a8:101::1", "private"),  # 6to4 of 192.168.1.1
]
PUBLIC = [
    "93.184.215.14",
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
]


@pytest.mark.parametrize(("address", "reason"), BLOCKED)
def test_blocked_address_classes(address, reason):
    assert address_block_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address):
    assert address_block_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("::", "::"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("example.com", None),
        ("1.2.3.4.5", None),
        ("256.1.1.1", None),
        ("hooks.cardloop.test", None),
    ],
)
def test_literal_address_understands_numeric_host_forms(host, expected):
    found = webhooks.literal_address(host)
    assert (str(found) if found else None) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",
        "ftp://hooks.example.com/x",
        "https://user:pw@hooks.example.com/x",
        "https://user@hooks.example.com/x",
        "https://hooks.example.com/x#frag",
        "https://127.0.0.1/",
        "http://2130706433/",
        "https://2130706433/",
        "https://0x7f.1/",
        "https://[::]/",
        "https://[::1]:8443/",
        "https://[::ffff:127.0.0.1]/",
        "https://10.0.0.5/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/",
        "https://[fd00::1]/",
        "https://localhost/",
        "https://api.localhost/",
        "not a url",
        "https:///nohost",
        "https://xn--/x",  # an IDNA label that does not decode
        "https://hooks.example.com:99999/x",  # the resolver would take 99999 - 65536
        "https://hooks.example.com:0/x",
        "https://receiver/x",  # single-label: completed by the server's search domains
        "https://receiver./x",
    ],
)
def test_registration_refuses_unsafe_urls(url, settings):
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(webhooks.DestinationRefused):
        webhooks.check_registration_url(url)


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/x?a=1", "https://93.184.215.14/hook", "https://例え.jp/"]
)
def test_registration_accepts_public_https_urls(url, settings):
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = False
    webhooks.check_registration_url(url)


def test_the_test_flag_lifts_only_the_address_check_at_registration(settings):
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = True
    webhooks.check_registration_url("https://127.0.0.1:8443/hook")
    webhooks.check_registration_url("https://localhost/hook")
    for url in ["http://127.0.0.1/", "https://u:p@127.0.0.1/", "https://127.0.0.1/#x"]:
        with pytest.raises(webhooks.DestinationRefused):
            webhooks.check_registration_url(url)


# ---------------------------------------------------------------------------------------------
# At send time
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def post_spy(monkeypatch):
    """Records every call of WebhookSender._post, the one method that opens connections."""
    calls = []
    original = webhooks.WebhookSender._post

    def spy(self, url, hostname, port, address, headers, request, deadline):
        calls.append(address)
        return original(self, url, hostname, port, address, headers, request, deadline)

    monkeypatch.setattr(webhooks.WebhookSender, "_post", spy)
    return calls


def _destination(url, secret=None):
    """A destination written with the ORM, bypassing registration checks (as if it had been
    stored before a rule existed, or its DNS changed since)."""
    from plumbing.secretstore import write_secret

    return WebhookDestination.objects.create(
        name=f"raw {url}",
        url=url,
        event_types=["interaction.resolved"],
        secret_ref=write_secret(secret or webhooks.generate_secret()),
    )


@pytest.mark.parametrize(("address", "reason"), BLOCKED)
def test_each_blocked_class_is_refused_at_send_time_and_nothing_connects(
    address, reason, strict_settings, dns, receiver, post_spy, emit_event, make_worker
):
    dns.answers["hooks.cardloop.test"] = [address]
    _destination(receiver.url())
    event = emit_event()
    make_worker().run_until_idle()

    item = OutboxItem.objects.get(event=event)
    attempt = WebhookAttempt.objects.get(outbox_item=item)
    assert attempt.outcome == "blocked_destination"
    assert webhooks.ADDRESS_KINDS[reason] in attempt.error  # English, whatever the language
    assert item.status == "failed"
    assert post_spy == []
    assert receiver.connections == 0
    assert dns.calls == ["hooks.cardloop.test"]


def test_a_mixed_answer_is_refused_as_a_whole(
    strict_settings, dns, receiver, post_spy, emit_event, make_worker
):
    dns.answers["hooks.cardloop.test"] = ["93.184.215.14", "10.0.0.5"]
    _destination(receiver.url())
    event = emit_event()
    make_worker().run_until_idle()
    attempt = WebhookAttempt.objects.get(outbox_item__event=event)
    assert attempt.outcome == "blocked_destination"
    assert "10.0.0.5 is a private address" in attempt.error
    assert post_spy == []


@pytest.mark.parametrize(
    "url",
    [
        "https://2130706433:{port}/",
        "https://0x7f.1:{port}/",
        "https://[::]:{port}/",
        "https://[::ffff:127.0.0.1]:{port}/",
        "https://127.0.0.1:{port}/",
    ],
)
def test_literal_forms_are_refused_at_send_time_without_dns(
    url, strict_settings, dns, receiver, post_spy, emit_event, make_worker
):
    _destination(url.format(port=receiver.port))
    event = emit_event()
    make_worker().run_until_idle()
    attempt = WebhookAttempt.objects.get(outbox_item__event=event)
    assert attempt.outcome == "blocked_destination"
    assert dns.calls == []
    assert post_spy == []
    assert receiver.connections == 0


@pytest.mark.parametrize(
    "url", ["http://2130706433/", "http://hooks.cardloop.test/", "https://u:p@hooks.cardloop.test/"]
)
def test_urls_of_the_wrong_shape_are_refused_at_send_time_even_with_the_test_flag(
    url, webhook_settings, dns, post_spy, emit_event, make_worker
):
    _destination(url)
    event = emit_event()
    make_worker().run_until_idle()
    attempt = WebhookAttempt.objects.get(outbox_item__event=event)
    assert attempt.outcome == "invalid_destination"
    assert OutboxItem.objects.get(event=event).status == "failed"
    assert post_spy == []


def test_every_attempt_resolves_once_and_connects_to_the_checked_address(
    strict_settings, dns, monkeypatch, emit_event, make_worker, clock
):
    """DNS rebinding: the first answer is public, the next one loopback. The second attempt is
    checked on its own answer and refused; each attempt looked the name up exactly once."""
    dns.answers["rebind.cardloop.test"] = [["93.184.215.14"], ["127.0.0.1"]]
    connected = []

    def fake_post(self, url, hostname, port, address, headers, request, deadline):
        connected.append((hostname, address, headers["host"]))
        return AttemptResult(Outcome.RETRYABLE_STATUS, status_code=503, error="HTTP 503")

    monkeypatch.setattr(webhooks.WebhookSender, "_post", fake_post)
    _destination("https://rebind.cardloop.test/hook")
    event = emit_event()
    worker = make_worker()
    worker.run_until_idle()
    assert dns.calls == ["rebind.cardloop.test"]
    assert connected == [("rebind.cardloop.test", "93.184.215.14", "rebind.cardloop.test")]

    clock.advance(301)
    worker.run_until_idle()
    assert dns.calls == ["rebind.cardloop.test", "rebind.cardloop.test"]
    assert len(connected) == 1
    outcomes = list(
        WebhookAttempt.objects.filter(outbox_item__event=event)
        .order_by("attempt")
        .values_list("outcome", flat=True)
    )
    assert outcomes == ["retryable_status", "blocked_destination"]


def test_the_connection_keeps_host_and_sni_as_the_hostname(
    webhook_settings, dns, receiver, emit_event, make_worker
):
    destination = _destination(receiver.url("/pinned"))
    event = emit_event()
    make_worker().run_until_idle()
    assert OutboxItem.objects.get(event=event).status == "done", destination
    request = receiver.requests[0]
    assert request.headers["host"] == f"hooks.cardloop.test:{receiver.port}"
    assert request.sni == "hooks.cardloop.test"


def test_the_certificate_is_verified_against_the_hostname_not_the_address(
    webhook_settings, dns, receiver, emit_event, make_worker
):
    """The test certificate covers 127.0.0.1 too; a name it does not cover must still fail."""
    dns.answers["other.cardloop.test"] = ["127.0.0.1"]
    _destination(receiver.url(host="other.cardloop.test"))
    event = emit_event()
    make_worker().run_until_idle()
    attempt = WebhookAttempt.objects.get(outbox_item__event=event)
    assert attempt.outcome == "network_error"
    assert "certificate" in attempt.error.lower()
    assert receiver.count == 0


def test_an_unresolvable_name_is_a_retryable_network_error(
    strict_settings, dns, emit_event, make_worker
):
    _destination("https://nowhere.cardloop.test/")
    event = emit_event()
    make_worker().run_until_idle()
    attempt = WebhookAttempt.objects.get(outbox_item__event=event)
    assert attempt.outcome == "network_error"
    assert attempt.error.startswith("DNS:")
    assert OutboxItem.objects.get(event=event).status == "pending"


# ---------------------------------------------------------------------------------------------
# Signatures and secrets (constant-time comparisons)
# ---------------------------------------------------------------------------------------------


def test_signature_matches_the_standard_webhooks_reference_library():
    secret = webhooks.generate_secret()
    body = '{"id":"evt_1","data":{"text":"中文"}}'.encode()
    header = webhooks.signature_header([secret], "evt_1", 1_700_000_000, body)
    from datetime import UTC, datetime

    expected = Webhook(secret).sign(
        "evt_1", datetime.fromtimestamp(1_700_000_000, UTC), body.decode()
    )
    assert header == expected


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "v1,",
        "v1,AAAA",
        "v1,ä≠",
        "garbage",
        "v2,{good}",
        "v1,{other_head}{good_tail}",
        "v1,{good_head}x",
    ],
)
def test_verify_signature_is_false_without_raising_on_bad_headers(header):
    secret = webhooks.generate_secret()
    body = b'{"a":1}'
    good = webhooks.sign(secret, "evt_1", 1_700_000_000, body).split(",", 1)[1]
    if header:
        # one character changed, never by chance the same one (1 in 64 for a fixed letter)
        other_head = "A" if good[0] != "A" else "B"
        header = header.format(
            good=good, good_tail=good[1:], good_head=good[:-1], other_head=other_head
        )
    assert webhooks.verify_signature(secret, "evt_1", "1700000000", body, header) is False
    assert webhooks.verify_signature(secret, "evt_1", "1700000000", body, "v1," + good) is True


def test_verify_signature_accepts_any_of_several_signatures():
    old, new = webhooks.generate_secret(), webhooks.generate_secret()
    header = webhooks.signature_header([new, old], "evt_1", 1, b"{}")
    assert webhooks.verify_signature(old, "evt_1", "1", b"{}", header)
    assert webhooks.verify_signature(new, "evt_1", "1", b"{}", header)
    assert not webhooks.verify_signature(webhooks.generate_secret(), "evt_1", "1", b"{}", header)


@pytest.mark.parametrize(
    "value",
    ["", "whsec_", "whsec_abc", "whsec_" + "A" * 20, "not base64 !!", "whsec_" + "QQ==" * 40],
)
def test_pasted_secrets_must_be_base64_of_24_to_64_bytes(value):
    with pytest.raises(ValueError):
        webhooks.normalize_secret(value)


def test_pasted_secrets_are_normalized():
    secret = webhooks.generate_secret()
    assert webhooks.normalize_secret(secret) == secret
    assert webhooks.normalize_secret(secret.removeprefix("whsec_")) == secret


def test_retry_after_parsing():
    from datetime import UTC, datetime, timedelta

    now = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    later = "Sat, 01 Mar 2025 12:05:00 GMT"
    assert webhooks.parse_retry_after("120", now) == 120
    assert webhooks.parse_retry_after(" 7 ", now) == 7
    assert webhooks.parse_retry_after("86400", now) == 3600
    assert webhooks.parse_retry_after(later, now) == 300
    assert webhooks.parse_retry_after(later, now + timedelta(hours=1)) == 0
    assert webhooks.parse_retry_after("Sat, 01 Mar 2030 12:05:00 GMT", now) == 3600
    assert webhooks.parse_retry_after(None, now) is None
    for bad in ["soon", "-5", "1.5", "", "Sat, 99 Foo 2025", "²", "1²"]:
        assert webhooks.parse_retry_after(bad, now) is None
    assert webhooks.parse_retry_after("9" * 5000, now) == 3600  # more digits than int() reads


def test_hmac_comparisons_in_cardloop_are_constant_time():
    """Static check: no == / != on signature or digest values in Cardloop's code."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    pattern = re.compile(
        r"(signature|digest|token_hash|mac)\w*\s*[!=]=|[!=]=\s*\w*(signature|digest)"
    )
    offenders = []
    for path in root.glob("*/**/*.py"):
        if ".venv" in path.parts or "tests" in path.parts or "migrations" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert offenders == []
