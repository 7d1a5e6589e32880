"""The Slack Web API adapter: a leaf on the official `slack-sdk` (no Django models, no other
Cardloop layer). It takes plain values (token, base URL) and returns plain dicts.

Dry run: with no bot token nothing is sent; the call is logged (method and channel only, never
the token or message text) and a synthetic `ts` is returned, so a bot works end to end before its
Slack app is installed.

Public sources: `auth.test` https://api.slack.com/methods/auth.test,
`chat.postMessage` https://api.slack.com/methods/chat.postMessage.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

logger = logging.getLogger("cardloop.slack")

#: The public Web API root; tests point the client at a loopback stub instead.
DEFAULT_BASE_URL = "https://slack.com/api/"

#: Seconds before a Web API call is given up (slack-sdk's `timeout`).
TIMEOUT_SECONDS = 10


class SlackCallError(Exception):
    """A Web API call failed: `error` is Slack's `error` code (e.g. `invalid_auth`) or
    `transport` for network failures."""

    def __init__(self, error: str):
        super().__init__(error)
        self.error = error


@dataclass(frozen=True)
class ConnectionCheck:
    """The result of `check_connection`: `ok`, and on success Slack's `team_id`, `user_id`
    (the bot user) and `bot_id`; `dry_run` when no token is set (nothing was called)."""

    ok: bool
    dry_run: bool = False
    team_id: str = ""
    user_id: str = ""
    bot_id: str = ""
    error: str = ""


def client(token: str, base_url: str = DEFAULT_BASE_URL) -> WebClient:
    """A `slack_sdk.WebClient` for `token` at `base_url` (must end with `/`)."""
    return WebClient(token=token, base_url=base_url, timeout=TIMEOUT_SECONDS)


def check_connection(token: str, base_url: str = DEFAULT_BASE_URL) -> ConnectionCheck:
    """Call `auth.test` with `token`; never raises.

    No token → `ConnectionCheck(ok=False, dry_run=True)` and no call. A Slack error
    (`invalid_auth`, `account_inactive`, …) or a transport failure → `ok=False` with `error`.
    """
    if not token:
        logger.info("slack dry run: auth.test not called (no bot token)")
        return ConnectionCheck(ok=False, dry_run=True, error="no_token")
    try:
        resp = client(token, base_url).auth_test()
    except SlackApiError as exc:
        return ConnectionCheck(ok=False, error=str(exc.response.get("error") or "unknown"))
    except (SlackClientError, OSError):
        return ConnectionCheck(ok=False, error="transport")
    return ConnectionCheck(
        ok=True,
        team_id=str(resp.get("team_id") or ""),
        user_id=str(resp.get("user_id") or ""),
        bot_id=str(resp.get("bot_id") or ""),
    )


def post_message(
    token: str, channel: str, blocks: list[dict], text: str, base_url: str = DEFAULT_BASE_URL
) -> dict:
    """`chat.postMessage` of `blocks` (Block Kit list) with fallback `text` to `channel`.

    Returns `{"channel": str, "ts": str, "dry_run": bool}`. Without a token: dry run, a log
    line and a synthetic `ts` (`"<unix seconds>.<6 digits>"`, Slack's ts shape). Raises
    SlackCallError with Slack's error code, or `transport`.
    """
    if not token:
        now = time.time()
        ts = f"{int(now)}.{int((now % 1) * 1_000_000):06d}"
        logger.info("slack dry run: chat.postMessage to %s (%d blocks)", channel, len(blocks))
        return {"channel": channel, "ts": ts, "dry_run": True}
    try:
        resp = client(token, base_url).chat_postMessage(channel=channel, blocks=blocks, text=text)
    except SlackApiError as exc:
        raise SlackCallError(str(exc.response.get("error") or "unknown")) from None
    except (SlackClientError, OSError):
        raise SlackCallError("transport") from None
    return {"channel": str(resp.get("channel") or channel), "ts": str(resp["ts"]), "dry_run": False}


# ---------------------------------------------------------------------------------------------
# Reading a sent message back (a feedback area is replaced without Cardloop storing the answer)
# ---------------------------------------------------------------------------------------------


def read_message(
    token: str, channel: str, ts: str, base_url: str = DEFAULT_BASE_URL
) -> dict | None:
    """The message `ts` of conversation `channel` as Slack has it now: `{"ts", "text",
    "blocks", "thread_ts"}`, or None when Slack returns no message with that `ts` (deleted).

    `conversations.history` with `latest=ts`, `inclusive`, `limit=1` finds a message of the
    channel (https://api.slack.com/methods/conversations.history); a reply in a thread is not
    in the history, so then `conversations.replies` with `ts`
    (https://api.slack.com/methods/conversations.replies) is asked. Scopes: `channels:history`,
    `groups:history`, `im:history`, `mpim:history` (for the conversation types the app posts
    in). Raises SlackCallError (Slack's error code, or `transport`). Never logs the text."""
    web = client(token, base_url)
    try:
        history = web.conversations_history(channel=channel, latest=ts, inclusive=True, limit=1)
        found = _with_ts(history.get("messages"), ts)
        if found is None:
            replies = web.conversations_replies(
                channel=channel, ts=ts, latest=ts, inclusive=True, limit=1
            )
            found = _with_ts(replies.get("messages"), ts)
    except SlackApiError as exc:
        error = str(exc.response.get("error") or "unknown")
        if error == "thread_not_found":
            return None
        raise SlackCallError(error) from None
    except (SlackClientError, OSError):
        raise SlackCallError("transport") from None
    if found is None:
        return None
    return {
        "ts": str(found.get("ts") or ts),
        "text": str(found.get("text") or ""),
        "blocks": list(found.get("blocks") or []),
        "thread_ts": str(found.get("thread_ts") or ""),
    }


def _with_ts(messages, ts: str) -> dict | None:
    for message in messages or []:
        if isinstance(message, dict) and message.get("ts") == ts:
            return message
    return None
