"""Suite-wide pytest configuration: backend markers and the personas every app's tests use.

Markers (see pyproject): `postgres` runs only when DATABASE_URL points at PostgreSQL, `redis`
only with REDIS_URL, `browser` only with Chromium + Playwright. CI sets
`CARDLOOP_REQUIRE_BROWSER=1`, which turns a missing browser into a failure instead of a skip.
"""

from __future__ import annotations

import os
import shutil

import pytest
from django.conf import settings


def _browser_available() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return bool(shutil.which("chromium") or os.path.exists("/usr/bin/chromium"))


def pytest_collection_modifyitems(config, items):
    vendor = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    require_browser = os.environ.get("CARDLOOP_REQUIRE_BROWSER") == "1"
    has_browser = _browser_available()
    for item in items:
        if "postgres" in item.keywords and vendor != "postgresql":
            item.add_marker(pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL)"))
        if "redis" in item.keywords and not settings.REDIS_URL:
            item.add_marker(pytest.mark.skip(reason="needs Redis (REDIS_URL)"))
        if "browser" in item.keywords and not has_browser and not require_browser:
            item.add_marker(pytest.mark.skip(reason="needs Chromium + Playwright"))


@pytest.fixture(autouse=True)
def _empty_callback_bot_cache():
    """Every test starts with an empty callback bot cache (`botadmin.callbackcache`): the test
    database is emptied between tests without signals, and a bot of the last test (same app
    id, other secrets) must not answer this one's callbacks."""
    from botadmin import accesscache
    from botadmin.callbackcache import CALLBACK_BOTS
    from interactions.channels.slack import ingress as slack_ingress

    CALLBACK_BOTS.clear()
    accesscache.clear()  # manager tokens and team ids, for the same reason
    slack_ingress.forget_locales()


@pytest.fixture
def make_bot(db):
    """Factory: `make_bot(app_id="cli_x", app_secret="s", encrypt_key="ek",
    verification_token="vt", **fields)` → Bot with its secrets written to the secret store."""
    from botadmin.models import Bot
    from plumbing.secretstore import write_secret

    def make(app_id="cli_test_app", name=None, **fields):
        secrets = {k: fields.pop(k) for k in list(fields) if k in Bot.SECRET_FIELDS}
        bot = Bot(app_id=app_id, name=name or app_id, **fields)
        for key, value in secrets.items():
            if value:
                setattr(bot, Bot.SECRET_FIELDS[key], write_secret(value))
        bot.save()
        return bot

    return make


@pytest.fixture
def make_api_key(db):
    """Factory: `make_api_key(bot)` → (raw key, BotApiKey row)."""
    from botadmin.models import BotApiKey

    def make(bot, label="test"):
        raw, lookup = BotApiKey.new_raw()
        key = BotApiKey(bot=bot, label=label)
        key.set_raw(raw, lookup)
        key.save()
        return raw, key

    return make


@pytest.fixture
def bot_client(make_bot, make_api_key):
    """A DRF APIClient authenticated as the bot `cli_test_app` (no credentials → dry run).
    The bot is at `bot_client.bot`."""
    from rest_framework.test import APIClient

    bot = make_bot()
    raw, _key = make_api_key(bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.bot = bot
    client.raw_key = raw
    return client


# ---------------------------------------------------------------------------------------------
# Feishu: stub Open API, a bot with credentials, posting callbacks, registering handlers
# (helpers in tests/feishu.py, the stub in tests/lark_stub.py; see docs/DEVELOPING.md)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def lark_stub(settings, monkeypatch):
    """A loopback stub of the Feishu Open API (tests/lark_stub.py), started on an ephemeral
    port; every lark-oapi client of the test talks to it (`CARDLOOP_LARK_DOMAIN`)."""
    from interactions.lark.client import reset_clients
    from tests.lark_stub import FeishuStub

    stub = FeishuStub().start()
    settings.CARDLOOP_LARK_DOMAIN = stub.url
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    reset_clients()
    yield stub
    stub.stop()
    reset_clients()


@pytest.fixture
def lark_bot(make_bot):
    """The bot `cli_test_app` with an app secret, Encrypt Key and Verification Token
    (`tests.feishu.APP_SECRET`, `ENCRYPT_KEY`, `VERIFICATION_TOKEN`; the fixtures' token)."""
    from tests import feishu

    return make_bot(
        app_id=feishu.APP_ID,
        app_secret=feishu.APP_SECRET,
        encrypt_key=feishu.ENCRYPT_KEY,
        verification_token=feishu.VERIFICATION_TOKEN,
    )


@pytest.fixture
def lark_callback(transactional_db, lark_bot, client):
    """`lark_callback(payload, *, encrypt=True, headers=None)`: encrypt + sign `payload` (a
    dict, e.g. `tests.feishu.payload("card_action_feedback_click")`) for `lark_bot` and POST it
    to its callback URL with Django's test client. Handlers run in worker threads, hence the
    transactional database."""
    from tests import feishu

    def post(body, *, encrypt=True, headers=None, bot=None):
        bot = bot or lark_bot
        return feishu.post_callback(
            client,
            bot.app_id,
            body,
            encrypt_key=bot.secret("encrypt_key"),
            encrypt=encrypt,
            headers=headers,
        )

    return post


@pytest.fixture
def register_card_handler():
    """`register_card_handler(kind, fn)` / `register_card_handler.event(type, fn)`: register a
    card-action (or event) handler for this test only. A handler an app registered for the
    same kind is set aside meanwhile and restored afterwards."""
    from interactions.callbacks import registry

    kinds: list[tuple[str, object]] = []
    events: list[tuple[str, object]] = []

    def register(kind, handler):
        previous = registry.handler_for(kind)
        registry.unregister(kind)
        registry.register(kind, handler)
        kinds.append((kind, previous))
        return handler

    def register_event(event_type, handler):
        registry.register_event(event_type, handler)
        events.append((event_type, handler))
        return handler

    register.event = register_event
    yield register
    for kind, previous in reversed(kinds):
        registry.unregister(kind)
        if previous is not None:
            registry.register(kind, previous)
    for event_type, handler in events:
        registry.unregister_event(event_type, handler)
