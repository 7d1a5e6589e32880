"""ask_user_questions and progress sessions: `service` (asks: register, answer, cancel, the
panel contract), `progress` (progress sessions), `card` (the session's progress card, rendered
when the queue applies it), `handlers` (the `feishu_ask` and `progress` card-action handlers)."""
