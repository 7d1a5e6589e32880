"""Telegram as a channel (in progress).

| module | what |
|---|---|
| `botapi` | the Bot API adapter, a leaf on httpx (dry run without a token) |
| `admin` | Telegram bots' admin: write-only secrets, "check connection", "set webhook" |
| `render` | pure renderers (text + inline keyboard) and Telegram's limits |
| `ingress` | `POST /telegram/<bot_user_id>/webhook` (secret token, dedupe, dispatcher) |
| `handlers` | what a tap (`callback_query`) or a typed command (`message`) does |

Not built yet: the `Channel` implementation (sending interactions to Telegram and editing
them through the card-update queue), so `channel: "telegram"` is still refused by the API;
asks' multi-select state; feedback on final answers.
"""
