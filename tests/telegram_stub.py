"""A loopback stub of the Telegram Bot API that Cardloop's httpx client
(`interactions.channels.telegram.botapi`) talks to (tests only).

Start it with `TelegramStub(tokens={...}).start()` and pass `stub.base_url` as the client's
base URL (`CARDLOOP_TELEGRAM_API_BASE_URL`). Requests are `POST /bot<token>/<method>` with a
JSON body, answered `{ok: true, result}` or `{ok: false, error_code, description[, parameters]}`
(https://core.telegram.org/bots/api#making-requests).

It enforces, independently of Cardloop's own checker, the limits the Bot API documents:
- message `text` 1-4096 characters (https://core.telegram.org/bots/api#sendmessage);
- `InlineKeyboardButton.callback_data` 1-64 bytes, a button has `text` and exactly one action
  (https://core.telegram.org/bots/api#inlinekeyboardbutton); at most 100 buttons per keyboard
  (the Bot API's `BUTTONS_TOO_MUCH`: not in the documentation, the number it refuses above);
- `answerCallbackQuery` `text` 0-200 characters, and a callback query answered once
  (https://core.telegram.org/bots/api#answercallbackquery);
- `setWebhook` `secret_token` 1-256 characters of A-Z a-z 0-9 _ -
  (https://core.telegram.org/bots/api#setwebhook);
- an edit to the same text and keyboard is refused "message is not modified", an edit of an
  unknown message "message to edit not found".
`stub.rate_limit(method, retry_after, times=1)` makes the next calls of `method` answer 429
with `parameters.retry_after`. Every request is recorded in `stub.calls` as
`(method, token, params)`, in arrival order; `stub.messages[(chat_id, message_id)]` holds the
current text and keyboard of every sent message.
"""

from __future__ import annotations

import itertools
import json
import re
import threading

from tests.loopback import JsonHandler, LoopbackStub

MAX_TEXT = 4096
MAX_CALLBACK_DATA_BYTES = 64
MAX_BUTTONS = 100
MAX_TOAST = 200
SECRET_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}\Z")


class TelegramStub(LoopbackStub):
    def __init__(self, tokens: dict[str, str] | None = None):
        #: token → the bot's username.
        self.tokens: dict[str, str] = dict(tokens or {})
        self.calls: list[tuple[str, str, dict]] = []
        self.messages: dict[tuple[str, int], dict] = {}
        self.answered: set[str] = set()
        self.webhook: dict = {}
        self._rate_limits: dict[str, list[int]] = {}
        self._ids = itertools.count(1001)
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return self.origin

    def rate_limit(self, method: str, retry_after: int, times: int = 1) -> None:
        self._rate_limits[method] = [retry_after, times]

    def methods(self) -> list[str]:
        return [call[0] for call in self.calls]

    def start(self) -> TelegramStub:
        stub = self

        class Handler(JsonHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                params = json.loads(raw or "{}")
                match = re.match(r"^/bot([^/]+)/(\w+)$", self.path)
                token, method = (match.group(1), match.group(2)) if match else ("", "")
                with stub._lock:
                    stub.calls.append((method, token, params))
                    status, body = stub.answer(method, token, params)
                self.send_json(status, body)

        return self.serve(Handler)

    # -- answers --------------------------------------------------------------------------

    @staticmethod
    def _error(code: int, description: str, **parameters) -> tuple[int, dict]:
        body: dict = {"ok": False, "error_code": code, "description": description}
        if parameters:
            body["parameters"] = parameters
        return code, body

    @staticmethod
    def _ok(result) -> tuple[int, dict]:
        return 200, {"ok": True, "result": result}

    def keyboard_problem(self, markup) -> str | None:
        if markup is None:
            return None
        if "force_reply" in markup:
            return None if markup.get("force_reply") is True else "force_reply must be True"
        rows = markup.get("inline_keyboard")
        if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            return "inline_keyboard must be an array of arrays"
        buttons = [b for row in rows for b in row]
        if len(buttons) > MAX_BUTTONS:
            return "BUTTONS_TOO_MUCH"
        for button in buttons:
            if not isinstance(button, dict) or not button.get("text"):
                return "button text is empty"
            actions = [k for k in ("callback_data", "url") if k in button]
            if len(actions) != 1:
                return "a button needs exactly one action"
            data = button.get("callback_data")
            if data is not None:
                size = len(str(data).encode("utf-8"))
                if not 1 <= size <= MAX_CALLBACK_DATA_BYTES:
                    return "BUTTON_DATA_INVALID"
        return None

    def _text_problem(self, text) -> str | None:
        if not isinstance(text, str) or not 1 <= len(text) <= MAX_TEXT:
            return "message text is empty" if not text else "message is too long"
        return None

    def answer(self, method: str, token: str, params: dict) -> tuple[int, dict]:
        if token not in self.tokens:
            return self._error(401, "Unauthorized")
        limited = self._rate_limits.get(method)
        if limited and limited[1] > 0:
            limited[1] -= 1
            return self._error(
                429, f"Too Many Requests: retry after {limited[0]}", retry_after=limited[0]
            )
        if method == "getMe":
            bot_id = int(token.split(":", 1)[0])
            return self._ok(
                {"id": bot_id, "is_bot": True, "first_name": "Stub", "username": self.tokens[token]}
            )
        if method == "setWebhook":
            if not SECRET_TOKEN_RE.match(str(params.get("secret_token") or "")):
                return self._error(400, "Bad Request: secret token contains unallowed characters")
            self.webhook = dict(params)
            return self._ok(True)
        if method == "sendMessage":
            problem = self._text_problem(params.get("text")) or self.keyboard_problem(
                params.get("reply_markup")
            )
            if problem:
                return self._error(400, f"Bad Request: {problem}")
            message_id = next(self._ids)
            chat_id = str(params.get("chat_id"))
            self.messages[(chat_id, message_id)] = {
                "text": params["text"],
                "reply_markup": params.get("reply_markup"),
            }
            return self._ok(
                {"message_id": message_id, "chat": {"id": params.get("chat_id")}, "date": 0}
            )
        if method in ("editMessageText", "editMessageReplyMarkup"):
            key = (str(params.get("chat_id")), params.get("message_id"))
            current = self.messages.get(key)
            if current is None:
                return self._error(400, "Bad Request: message to edit not found")
            new = dict(current, reply_markup=params.get("reply_markup"))
            if method == "editMessageText":
                problem = self._text_problem(params.get("text"))
                if problem:
                    return self._error(400, f"Bad Request: {problem}")
                new["text"] = params["text"]
            problem = self.keyboard_problem(params.get("reply_markup"))
            if problem:
                return self._error(400, f"Bad Request: {problem}")
            if new == current:
                return self._error(
                    400,
                    "Bad Request: message is not modified: specified new message content and "
                    "reply markup are exactly the same as a current content and reply markup "
                    "of the message",
                )
            self.messages[key] = new
            return self._ok(True)
        if method == "answerCallbackQuery":
            query_id = str(params.get("callback_query_id") or "")
            if len(str(params.get("text") or "")) > MAX_TOAST:
                return self._error(400, "Bad Request: MESSAGE_TOO_LONG")
            if query_id in self.answered:
                return self._error(
                    400,
                    "Bad Request: query is too old and response timeout expired or query ID is invalid",
                )
            self.answered.add(query_id)
            return self._ok(True)
        return self._error(404, "Not Found")
