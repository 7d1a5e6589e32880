"""The Slack Web API adapter: a leaf on the official `slack-sdk` (no Django models, no other
Cardloop layer). It takes plain values (token, base URL) and returns plain dicts.

Dry run: with no bot token nothing is sent; the call is logged (method and channel only, never
the token or message text) and a synthetic `ts` is returned, so a bot works end to end before its
Slack app is installed.

Public sources: `auth.test` https://api.slack.com/methods/auth.test,
`chat.postMessage` https://api.slack.com/methods/chat.postMessage, `chat.update`
https://api.slack.com/methods/chat.update, `users.info`
https://api.slack.com/methods/users.info, `response_url`
https://api.slack.com/interactivity/handling#message_responses.
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
    """A Web API call failed: `error` is Slack's `error` code (e.g. `invalid_auth`,
    `ratelimited`) or `transport` for network failures; `status` the HTTP status (0 for
    transport failures); `retry_after` the seconds of an HTTP 429 `Retry-After` header
    (https://api.slack.com/docs/rate-limits), else None. `retryable`: a rate limit, a 5xx or
    a transport failure (trying again later may succeed)."""

    def __init__(self, error: str, *, status: int = 200, retry_after: float | None = None):
        super().__init__(error)
        self.error, self.status, self.retry_after = error, status, retry_after

    @property
    def retryable(self) -> bool:
        return self.error == "transport" or self.status == 429 or self.status >= 500


def _call_error(exc: SlackApiError) -> SlackCallError:
    response = exc.response
    status = int(getattr(response, "status_code", 200) or 200)
    headers = {str(k).lower(): v for k, v in (getattr(response, "headers", None) or {}).items()}
    retry_after = headers.get("retry-after")
    if isinstance(retry_after, list):
        retry_after = retry_after[0] if retry_after else None
    try:
        seconds = float(retry_after) if retry_after is not None else None
    except (TypeError, ValueError):
        seconds = None
    error = str(response.get("error") or ("ratelimited" if status == 429 else "unknown"))
    return SlackCallError(error, status=status, retry_after=seconds)


def synthetic_ts() -> str:
    """A dry run's message `ts` (`"<unix seconds>.<6 digits>"`, Slack's ts shape)."""
    now = time.time()
    return f"{int(now)}.{int((now % 1) * 1_000_000):06d}"


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
    token: str,
    channel: str,
    blocks: list[dict],
    text: str,
    base_url: str = DEFAULT_BASE_URL,
    *,
    thread_ts: str | None = None,
    send_key: str = "",
) -> dict:
    """`chat.postMessage` of `blocks` (Block Kit list) with fallback `text` to `channel`
    (in thread `thread_ts` when given). `send_key` (≤ 64 characters) goes into the message's
    metadata (`event_type` `SEND_EVENT_TYPE`, https://api.slack.com/metadata/using), so a
    retried send can find the message (`find_sent`): Slack has no idempotency key.

    Returns `{"channel": str, "ts": str, "dry_run": bool}`. Without a token: dry run, a log
    line and a synthetic `ts`. Raises SlackCallError with Slack's error code, or `transport`.
    """
    if not token:
        logger.info("slack dry run: chat.postMessage to %s (%d blocks)", channel, len(blocks))
        return {"channel": channel, "ts": synthetic_ts(), "dry_run": True}
    extra: dict = {"thread_ts": thread_ts} if thread_ts else {}
    if send_key:
        extra["metadata"] = {"event_type": SEND_EVENT_TYPE, "event_payload": {"send": send_key}}
    try:
        resp = client(token, base_url).chat_postMessage(
            channel=channel, blocks=blocks, text=text, **extra
        )
    except SlackApiError as exc:
        raise _call_error(exc) from None
    except (SlackClientError, OSError):
        raise SlackCallError("transport", status=0) from None
    return {"channel": str(resp.get("channel") or channel), "ts": str(resp["ts"]), "dry_run": False}


#: `event_type` of the metadata on every message Cardloop sends with a send key.
SEND_EVENT_TYPE = "cardloop_send"
#: How many of a conversation's newest messages `find_sent` looks through.
FIND_SENT_LIMIT = 100


def find_sent(
    token: str, channel: str, send_key: str, oldest: float, base_url: str = DEFAULT_BASE_URL
) -> str | None:
    """The `ts` of the message of conversation `channel` that `post_message` sent with
    `send_key`, posted since `oldest` (unix seconds), or None when there is none: one
    `conversations.history` page (`oldest`, `include_all_metadata`, the newest
    `FIND_SENT_LIMIT` messages; https://api.slack.com/methods/conversations.history), so a
    send interrupted between Slack's answer and Cardloop's record is not posted twice on a
    retry. Only the conversation's own history (not thread replies). Scopes: the
    `*:history` ones. Raises SlackCallError (Slack's error code, or `transport`)."""
    try:
        history = client(token, base_url).conversations_history(
            channel=channel,
            oldest=f"{max(oldest, 0):.6f}",
            include_all_metadata=True,
            limit=FIND_SENT_LIMIT,
        )
    except SlackApiError as exc:
        raise SlackCallError(str(exc.response.get("error") or "unknown")) from None
    except (SlackClientError, OSError):
        raise SlackCallError("transport", status=0) from None
    for message in history.get("messages") or []:
        metadata = message.get("metadata") if isinstance(message, dict) else None
        if (
            isinstance(metadata, dict)
            and metadata.get("event_type") == SEND_EVENT_TYPE
            and isinstance(metadata.get("event_payload"), dict)
            and metadata["event_payload"].get("send") == send_key
        ):
            return str(message.get("ts") or "") or None
    return None


def update_message(
    token: str,
    channel: str,
    ts: str,
    blocks: list[dict],
    text: str,
    base_url: str = DEFAULT_BASE_URL,
) -> dict:
    """`chat.update` of message `ts` in `channel` with `blocks` and fallback `text`
    (https://api.slack.com/methods/chat.update). Returns `{"channel", "ts", "dry_run"}`;
    without a token a dry run (one log line, no call). Raises SlackCallError (`retry_after`
    set for HTTP 429)."""
    if not token:
        logger.info("slack dry run: chat.update of %s in %s (%d blocks)", ts, channel, len(blocks))
        return {"channel": channel, "ts": ts, "dry_run": True}
    try:
        client(token, base_url).chat_update(channel=channel, ts=ts, blocks=blocks, text=text)
    except SlackApiError as exc:
        raise _call_error(exc) from None
    except (SlackClientError, OSError):
        raise SlackCallError("transport", status=0) from None
    return {"channel": channel, "ts": ts, "dry_run": False}


def post_ephemeral(response_url: str, text: str) -> bool:
    """Send `text` as an ephemeral message (only the clicker sees it) to an interaction's
    `response_url` with slack-sdk's `WebhookClient`
    (https://api.slack.com/interactivity/handling#message_responses). Never raises; returns
    whether Slack answered 200. Never logs the URL (it is a bearer capability) or the text."""
    from slack_sdk.webhook import WebhookClient

    try:
        resp = WebhookClient(response_url, timeout=TIMEOUT_SECONDS).send(
            text=text, response_type="ephemeral", replace_original=False
        )
    except (SlackClientError, OSError):
        logger.warning("slack ephemeral message failed: transport")
        return False
    if resp.status_code != 200:
        logger.warning("slack ephemeral message failed: HTTP %s", resp.status_code)
    return resp.status_code == 200


def user_locale(token: str, user: str, base_url: str = DEFAULT_BASE_URL) -> str | None:
    """The Slack locale (IETF tag, e.g. "en-US", "zh-CN") of workspace user `user`, from
    `users.info` with `include_locale` (https://api.slack.com/methods/users.info; needs the
    `users:read` scope). "" when Slack will not tell: no token (dry run), a Slack error (e.g.
    `missing_scope`, `user_not_found`); None when it may tell later (a rate limit, a 5xx, a
    transport failure). Never raises; logs the error code only, never the user id."""
    if not token or not user:
        return ""
    try:
        resp = client(token, base_url).users_info(user=user, include_locale=True)
    except SlackApiError as exc:
        error = _call_error(exc)
        logger.info("slack users.info failed: %s", error.error)
        return None if error.retryable else ""
    except (SlackClientError, OSError):
        logger.info("slack users.info failed: transport")
        return None
    found = resp.get("user")
    locale = found.get("locale") if isinstance(found, dict) else None
    return str(locale) if isinstance(locale, str) else ""


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
        raise SlackCallError("transport", status=0) from None
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
