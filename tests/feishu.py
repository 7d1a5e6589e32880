"""Helpers to build, seal and post Feishu payloads in tests (every app's tests may use them).

    from tests import feishu

    body = feishu.payload("card_action_feedback_click", {"event.action.value.delivery": "del_1"})
    response = feishu.post_callback(client, "cli_test_app", body, encrypt_key=EK)
    status, headers, answer = await feishu.apost_callback("cli_test_app", body, encrypt_key=EK)
    feishu.assert_valid_card(card)

Fixtures in `tests/fixtures/feishu/` are real-format Feishu bodies with placeholder ids
(`cli_test_app`, `vt_test_token`, `ou_requester`, `om_final_card` …). The root `conftest.py`
wraps these in fixtures: `lark_bot`, `lark_callback`, `lark_stub`, `register_card_handler`.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from interactions.lark.cardjson import validate_card
from interactions.lark.signing import seal

FIXTURES = Path(__file__).parent / "fixtures" / "feishu"

#: Credentials the `lark_bot` fixture uses (the fixtures carry `vt_test_token`).
APP_ID = "cli_test_app"
APP_SECRET = "test-app-secret"
ENCRYPT_KEY = "test-encrypt-key"
VERIFICATION_TOKEN = "vt_test_token"


def set_path(payload: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at dotted `path` (objects are created on the way)."""
    node = payload
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def payload(
    name: str, changes: dict[str, Any] | None = None, *, fresh_event_id: bool = True
) -> dict[str, Any]:
    """Load fixture `name` (without `.json`), give it a fresh `header.event_id` (unless
    `fresh_event_id=False`) and apply `changes` ({"event.action.value.delivery": "del_1"})."""
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    if fresh_event_id and isinstance(data.get("header"), dict):
        data["header"]["event_id"] = uuid.uuid4().hex
    for path, value in (changes or {}).items():
        set_path(data, path, value)
    return data


def post_callback(
    client,
    app_id: str,
    body: dict[str, Any] | bytes,
    *,
    encrypt_key: str = ENCRYPT_KEY,
    encrypt: bool = True,
    headers: dict[str, str] | None = None,
    sealed: tuple[bytes, dict[str, str]] | None = None,
):
    """Seal `body` as Feishu does and POST it to `/lark/<app_id>/callback` with Django's test
    `client`; `headers` override / add headers (a value None removes one); `sealed` posts a
    pre-sealed `(raw, headers)` as is. Returns the response."""
    raw, sent = (
        sealed if sealed is not None else seal(body, encrypt_key=encrypt_key, encrypt_body=encrypt)
    )
    sent = dict(sent)
    for key, value in (headers or {}).items():
        if value is None:
            sent.pop(key, None)
        else:
            sent[key] = value
    extra = {
        f"HTTP_{k.upper().replace('-', '_')}": v
        for k, v in sent.items()
        if k.lower() != "content-type"
    }
    return client.post(
        f"/lark/{app_id}/callback",
        data=raw,
        content_type=sent.get("Content-Type", "application/json"),
        **extra,
    )


async def apost_callback(
    app_id: str,
    body: dict[str, Any] | bytes,
    *,
    encrypt_key: str = ENCRYPT_KEY,
    encrypt: bool = True,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Like `post_callback`, through the project's ASGI application (channels'
    `HttpCommunicator`): returns `(status, headers, JSON body)`."""
    # local for start-up cost: importing the ASGI application builds the whole stack (the
    # Feishu callback route with lark-oapi) and runs the system checks; only the tests that
    # post through it pay for that
    from channels.testing import HttpCommunicator

    from cardloop.asgi import application

    raw, sent = seal(body, encrypt_key=encrypt_key, encrypt_body=encrypt)
    sent = {"Host": "testserver", **sent, **(headers or {})}
    communicator = HttpCommunicator(
        application,
        "POST",
        f"/lark/{app_id}/callback",
        body=raw,
        headers=[(k.lower().encode(), v.encode()) for k, v in sent.items()],
    )
    response = await communicator.get_response(timeout=10)
    await communicator.wait(timeout=10)  # let the app finish: response.close() runs after-answer
    response_headers = {k.decode().lower(): v.decode() for k, v in response["headers"]}
    return response["status"], response_headers, json.loads(response["body"])


def assert_valid_card(card: dict[str, Any]) -> None:
    """Fail with the validator's problems when `card` is not valid Card JSON 2.0."""
    problems = validate_card(card)
    assert not problems, "invalid card:\n  " + "\n  ".join(problems)


def read_text(card: Any, locale: str) -> list[str]:
    """The texts a Feishu client in `locale` (`zh_cn`, `en_us`) shows on `card`, in card order:
    each text object's or markdown's `i18n_content[locale]` where it has one, else its
    `content` (what Feishu documents for component-level multilingual cards). Reads no
    callback values, names or ids."""
    out: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for child in node:
                visit(child)
            return
        if not isinstance(node, dict):
            return
        if node.get("tag") in ("plain_text", "lark_md", "markdown") and "content" in node:
            out.append((node.get("i18n_content") or {}).get(locale, node["content"]))
        for key, value in node.items():
            if key not in ("behaviors", "i18n_content") and isinstance(value, dict | list):
                visit(value)

    visit(card)
    return out


def assert_bilingual_card(card: dict[str, Any]) -> None:
    """`card` is valid Card JSON 2.0 and every text that carries a multilingual field has both
    Chinese and English."""
    assert_valid_card(card)

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for child in node:
                visit(child)
        elif isinstance(node, dict):
            if "i18n_content" in node:
                assert set(node["i18n_content"]) == {"zh_cn", "en_us"}, node
            for value in node.values():
                visit(value)

    visit(card)
