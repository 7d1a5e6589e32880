"""The one lifecycle of every interaction: `resolve` (the one state change, cancel, expiry,
resolution hooks), `waiters` (waking long-polls), `longpoll` (waiting for a final state)."""
