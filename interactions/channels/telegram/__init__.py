"""Telegram as a channel.

| module | what |
|---|---|
| `botapi` | the Bot API adapter, a leaf on httpx (dry run without a token) |
| `admin` | Telegram bots' admin: write-only secrets, "check connection", "set webhook" |
| `render` | pure renderers (text + inline keyboard) and Telegram's limits |
| `channel` | `TelegramChannel`: send, queue edits, apply them (`editMessageText`) |
| `ingress` | `POST /telegram/<bot_user_id>/webhook` (secret token, dedupe, dispatcher) |
| `handlers` | what a tap (`callback_query`) or a typed command (`message`) does |

Feedback on final answers lives in the feedback app (`feedback.telegram_cards`,
`feedback.telegram_delivery`), handed over in `FeedbackConfig.ready()` (`handlers.
use_callback_handler`, `handlers.use_reply_handler`, `TelegramChannel.use_feedback_renderer`).
Not built yet: progress cards and asks on Telegram (the ask renderers exist; the server-side
multi-select state and sending asks here do not).
"""
