"""Channel kinds, what each can show, and which interaction tools an agent session may expose.

Pure functions, no I/O. A channel without buttons gets the text fallback, which says why there
are no buttons (a person who sees only text must know that typing is the way to answer).

| channel  | buttons | forms | message update | markdown cards | rendered as |
|----------|---------|-------|----------------|----------------|-------------|
| feishu   | yes     | yes   | yes            | yes            | Card JSON 2.0 (sent by Cardloop) |
| slack    | yes     | yes   | yes            | yes (mrkdwn)   | Block Kit (sent by Cardloop) |
| telegram | yes     | no    | yes            | no             | text + inline keyboard (sent by Cardloop) |
| wechat   | no      | no    | no             | no             | text fallback (the backend sends it) |
| text     | no      | no    | no             | no             | text fallback (CLI and other plain-text channels) |
| webhook  | no      | no    | no             | no             | text fallback (any other channel) |

Accepted spellings: `cli` means `text`; `other` means `webhook`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from django.utils.translation import gettext_lazy as _

FEISHU = "feishu"
SLACK = "slack"
TELEGRAM = "telegram"
WECHAT = "wechat"
TEXT = "text"
WEBHOOK = "webhook"

#: Every channel kind, in the order the API documents them.
KINDS: tuple[str, ...] = (FEISHU, SLACK, TELEGRAM, WECHAT, TEXT, WEBHOOK)
#: Other spellings accepted on input.
ALIASES = {"cli": TEXT, "other": WEBHOOK, "lark": FEISHU}


@dataclass(frozen=True)
class Capabilities:
    """What a channel can show. `buttons`: native clickable buttons; `forms`: input forms;
    `update`: an already sent message can be changed (so a final state can replace buttons);
    `markdown`: rich markdown cards. A channel without buttons gets the text fallback."""

    buttons: bool
    forms: bool
    update: bool
    markdown: bool

    @property
    def text_fallback(self) -> bool:
        return not self.buttons

    def to_json(self) -> dict[str, bool]:
        return {**asdict(self), "text_fallback": self.text_fallback}


CAPABILITIES: dict[str, Capabilities] = {
    FEISHU: Capabilities(buttons=True, forms=True, update=True, markdown=True),
    # Block Kit buttons and input blocks, chat.update, mrkdwn (https://api.slack.com/block-kit)
    SLACK: Capabilities(buttons=True, forms=True, update=True, markdown=True),
    TELEGRAM: Capabilities(buttons=True, forms=False, update=True, markdown=False),
    WECHAT: Capabilities(buttons=False, forms=False, update=False, markdown=False),
    TEXT: Capabilities(buttons=False, forms=False, update=False, markdown=False),
    WEBHOOK: Capabilities(buttons=False, forms=False, update=False, markdown=False),
}

#: The person ids of a channel whose ids are not Feishu open_ids (`requester_open_id`,
#: `allowed_open_ids`): Telegram user ids are integers (https://core.telegram.org/bots/api#user);
#: Slack user ids are `U…` / `W…` (https://api.slack.com/changelog/2016-08-11-user-id-format-changes).
OPERATOR_ID_PATTERNS = {TELEGRAM: r"^[0-9]{1,20}\Z", SLACK: r"^[UW][A-Z0-9]{2,30}\Z"}
#: Every form a person id may take on input (Feishu open_id or a channel's own).
ANY_OPERATOR_ID_PATTERN = r"^(?:ou_[A-Za-z0-9_-]+|[0-9]{1,20}|[UW][A-Z0-9]{2,30})$"

#: Why a channel shows typed commands instead of buttons (said in the text fallback).
NO_BUTTONS_REASON = {
    WECHAT: _("WeChat messages cannot carry buttons"),
    TEXT: _("this is a plain-text channel without buttons"),
    WEBHOOK: _("this channel cannot show interactive cards"),
}


def normalize(kind: str) -> str | None:
    """The canonical channel kind for `kind` (case-insensitive, aliases accepted), or None."""
    value = (kind or "").strip().lower()
    value = ALIASES.get(value, value)
    return value if value in CAPABILITIES else None


def capabilities(kind: str) -> Capabilities:
    """Capabilities of channel `kind` (canonical or alias); unknown kinds get webhook's
    (nothing interactive: the safe answer)."""
    return CAPABILITIES[normalize(kind) or WEBHOOK]


# ---------------------------------------------------------------------------------------------
# Which tools an agent session may expose (GET /api/v1/capabilities)
# ---------------------------------------------------------------------------------------------

#: `feishu-{botId}-private-{userId}`: a Feishu private (p2p) session.
FEISHU_PRIVATE_RE = re.compile(r"^feishu-(?P<bot>[^-\s]+)-private-(?P<user>\S+)$")
#: A Feishu group session's workspace path contains this segment.
FEISHU_GROUP_SEGMENT = "/feishu-chat/"
#: A WeChat session: `wechat-…` / `weixin-…` project keys, or a `/wechat-chat/` workspace.
WECHAT_KEY_RE = re.compile(r"^(wechat|weixin)-", re.IGNORECASE)
WECHAT_SEGMENT = "/wechat-chat/"


@dataclass(frozen=True)
class SessionCapabilities:
    """The answer of the session rule for one agent session.

    `channel`: feishu | wechat | text (None when the session names no channel);
    `session`: private | group | "" (Feishu only); `ask_user_questions` and `approvals`:
    whether the session may expose those tools (None = no opinion: keep the default tools);
    `reason`: a stable code saying which branch of the rule decided.
    """

    channel: str | None
    session: str
    subagent: bool
    capabilities: Capabilities | None
    ask_user_questions: bool | None
    approvals: bool | None
    reason: str

    def to_json(self) -> dict:
        return {
            "channel": self.channel,
            "session": self.session or None,
            "subagent": self.subagent,
            "capabilities": self.capabilities.to_json() if self.capabilities else None,
            "tools": {
                "ask_user_questions": self.ask_user_questions,
                "approvals": self.approvals,
            },
            "reason": self.reason,
        }


def session_capabilities(
    project_key: str = "", workspace: str = "", subagent: str | bool | None = None
) -> SessionCapabilities:
    """Apply the session rule to one agent session (which interaction tools it may expose).

    1. Any sub-agent (`subagent` set and not "", "0", "false", "no": a foreground delegate or a
       background task) may not expose `ask_user_questions` (a sub-agent never asks the user
       directly); approvals still reach the parent's channel through the backend.
    2. A Feishu private session (`project_key` matches `feishu-{botId}-private-{userId}`) or a
       Feishu group session (`workspace` contains `/feishu-chat/`) may expose it.
    3. A WeChat session (project key `wechat-…`/`weixin-…`, or `/wechat-chat/` in the
       workspace) may not: WeChat has no forms or buttons; approvals use the text fallback.
    4. Any other session keeps its default tools (`null`: Cardloop has no opinion).
    """
    is_subagent = _truthy(subagent)
    project_key = (project_key or "").strip()
    workspace = (workspace or "").replace("\\", "/")
    channel, session = None, ""
    if FEISHU_PRIVATE_RE.match(project_key):
        channel, session = FEISHU, "private"
    elif FEISHU_GROUP_SEGMENT in workspace:
        channel, session = FEISHU, "group"
    elif WECHAT_KEY_RE.match(project_key) or WECHAT_SEGMENT in workspace:
        channel = WECHAT
    caps = CAPABILITIES[channel] if channel else None
    if is_subagent:
        return SessionCapabilities(
            channel, session, True, caps, False, True if channel else None, "subagent"
        )
    if channel == FEISHU:
        return SessionCapabilities(channel, session, False, caps, True, True, f"feishu_{session}")
    if channel == WECHAT:
        return SessionCapabilities(channel, "", False, caps, False, True, "wechat")
    return SessionCapabilities(None, "", False, None, None, None, "default")


def _truthy(value: str | bool | None) -> bool:
    if isinstance(value, bool):
        return value
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off", "none")
