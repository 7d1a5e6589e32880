"""Telegram as a channel.

| module | what |
|---|---|
| `botapi` | the Bot API adapter, a leaf on httpx (dry run without a token) |
| `admin` | Telegram bots' admin: write-only secrets, "check connection", "set webhook" |
| `render` | pure renderers (text + inline keyboard) and Telegram's limits |
| `channel` | `TelegramChannel`: send, queue edits, apply them (`editMessageText`) |
| `ingress` | `POST /telegram/<bot_user_id>/webhook` (secret token, dedupe, dispatcher) |
| `handlers` | what a tap (`callback_query`) or a typed command (`message`) does |
| `progress` | the progress message with its asks as inline keyboards (pure) |
| `asks` | asks on it: the server-side keyboard state, taps, "Other…" prompts and replies |

Feedback on final answers lives in the feedback app (`feedback.telegram_cards`,
`feedback.telegram_delivery`), handed over in `FeedbackConfig.ready()` (`handlers.
use_callback_handler`, `handlers.use_reply_handler`, `TelegramChannel.use_feedback_renderer`).
"""
