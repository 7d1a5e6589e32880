"""The OpenAPI schema at `/api/schema/` is exactly true: schemathesis generates requests from it
(valid and invalid data) and sends them to the ASGI application in process, with a bot API key
and with a team manager's DRF token, and every answer must conform — no server error, a status
code the schema documents, a body matching the documented schema, valid data accepted and
invalid data refused (schemathesis' default checks).

Bounds, so the run fits CI on two cores: a fixed number of examples per operation, no
deadline, derandomized (the same cases every run). Long-polls are never held: a generated
`wait` in 0–60 is sent as 0 (values outside that range are still sent, and must be refused).
"""

from __future__ import annotations

import copy
import json
import uuid

import pytest
import schemathesis
from django.utils import translation
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings

from cardloop.asgi import application

MAX_EXAMPLES = 10
#: A Card JSON 2.0 answer card.
CARD = {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "content": "The answer"}]}}
#: A Block Kit answer (Slack).
BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "The answer"}}]


def _served_schema() -> dict:
    """The document `/api/schema/` serves (generated here: at collection Django's test host is
    not allowed yet, so it cannot be fetched through the app)."""
    with translation.override("en"):
        generated = SchemaGenerator().get_schema(request=None, public=True)
        return json.loads(OpenApiJsonRenderer().render(generated))


schema = schemathesis.openapi.from_dict(_served_schema())
schema.app = application
# The API refuses NUL and lone surrogates in every string (400 `bad_request`, stated in the
# schema's error descriptions and docs/CONTRACT.md §1): valid data holds neither.
schema.config.generation.update(allow_x00=False, codec="utf-8")
bot_api = schema.exclude(path_regex="^/api/v1/analytics/")
analytics_api = schema.include(path_regex="^/api/v1/analytics/")

FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def bot_key(transactional_db, make_bot, make_api_key):
    """The Authorization header of a bot API key."""
    from botadmin.models import SlackApp, TelegramBot

    bot = make_bot()
    SlackApp.objects.create(bot=bot, app_id="A0FUZZAPP")  # dry run: no bot token
    TelegramBot.objects.create(bot=bot, bot_user_id=987654321)  # dry run: no bot token
    raw, _key = make_api_key(bot)
    return f"Bearer {raw}"


@pytest.fixture
def manager_token(transactional_db):
    """The Authorization header of a team manager's API token."""
    from django.contrib.auth import get_user_model

    from botadmin import services
    from botadmin.models import Team, TeamMembership

    team = Team.objects.create(name="Fuzz team")
    user = get_user_model().objects.create_user("fuzz-manager", password="x")
    TeamMembership.objects.create(team=team, user=user)
    raw, _token = services.issue_manager_token("fuzz", user)
    return f"Token {raw}"


def _analytics_range_is_valid(query: dict) -> bool:
    from analytics import periods

    try:
        tz = periods.resolve_zone(query.get("tz") or "UTC")
        start = periods.parse_boundary(str(query.get("from", "")), tz)
        end = periods.parse_boundary(str(query.get("to", "")), tz)
    except ValueError:
        return False
    return start < end and not periods.exceeds_max_span(start, end, tz)


def _meet_rules_stated_in_words(case) -> None:
    """Valid data also follows the rules the schema states only in its descriptions (JSON
    schema cannot express them); a generated valid case is brought in line with them:

    - `GET /api/v1/events`: `after` is a cursor the feed issued;
    - analytics: `tz` is an IANA zone name; `from` and `to` are dates or datetimes, from < to,
      at most 366 days apart;
    - `PUT …/progress`: the first call of a session names `chat_id` or `open_id`, on a
      channel this server shows progress on (`Channel.shows_progress`; Slack and Telegram
      for a bot with their app, a conversation id of theirs); later calls keep that channel;
    - `POST /api/v1/deliveries`: a Slack answer (`channel` slack, or `blocks` without a
      channel) is Block Kit blocks to a Slack conversation id, for a bot with a Slack app (the
      fuzzed bot has one), with the requester as a Slack user id; a Feishu answer carries none
      of the Slack-only fields; `card` is a Card JSON 2.0 card (Feishu's format, checked by
      Cardloop's card validator), a registered message is not another delivery's, and the keys
      of proposed `feedback_options` are unique, with reasons only beside a negative button;
      a Telegram answer (`channel` telegram) is `text` (Slack's fallback text is at most 4000
      characters) to an integer chat id, for a bot with a Telegram bot (the fuzzed bot has
      one), with the requester's digits, and carries no card, blocks or registration;
    - `POST /api/v1/interactions`: action ids, action values and form field names are unique,
      labels are not only whitespace, and on Slack or Telegram the requester and the allowed
      people are named by their id there (a Slack user id, a Telegram user's number);
    - `POST …/asks`: option labels are unique within a question, and a requester is named
      (or known from the session's progress card).
    """
    from analytics import periods
    from feedback import events

    path, method = case.operation.path, case.method.upper()
    # Hypothesis may hand the same objects to several cases: change copies.
    case.query = query = copy.deepcopy(case.query)
    case.body = body = copy.deepcopy(case.body)
    if path == "/api/v1/events" and query and query.get("after"):
        try:
            events.decode_cursor(str(query["after"]))
        except events.InvalidCursor:
            query["after"] = events.encode_cursor(0)
    elif path.startswith("/api/v1/analytics/") and query is not None:
        if query.get("tz") and query["tz"] not in periods.known_zones():
            query["tz"] = "UTC"
        if not _analytics_range_is_valid(query):
            query["from"], query["to"] = "2025-03-01", "2025-03-08T12:00:00Z"
        query.pop("cursor", None)  # opaque: only `next`/`previous` of an earlier page
    elif path.endswith("/progress") and method == "PUT" and isinstance(body, dict):
        _progress_in_line(case.path_parameters.get("session_id"), body)
    elif path == "/api/v1/deliveries" and isinstance(body, dict):
        slack = body.get("channel") == "slack" or (
            "channel" not in body and body.get("blocks") is not None
        )
        if body.get("channel") == "telegram":  # text to a chat id, the requester's digits
            body["chat_id"] = "-1001234567890"
            for name in ("requester_open_id", "card", "blocks", "platform_message_id", "card_id"):
                body.pop(name, None)
            if body.get("requester_user_id"):
                body["requester_user_id"] = "4242"
            # Telegram counts UTF-16 units: a schema-long text of astral characters is over
            if not str(body.get("text") or "").strip() or len(str(body["text"])) > 2000:
                body["text"] = "The answer"
        elif slack:  # Block Kit blocks, a Slack conversation, the requester as a Slack user id
            body["blocks"] = BLOCKS
            body["chat_id"] = "C0FUZZCHAN"
            body.pop("requester_open_id", None)
            body.pop("card", None)  # a Feishu card is not a Slack message
            for name in ("platform_message_id", "card_id"):  # Cardloop sends Slack answers
                body.pop(name, None)
            if body.get("requester_user_id"):
                body["requester_user_id"] = "U0FUZZUSER"
            if isinstance(body.get("text"), str):
                body["text"] = body["text"][:4000]
        else:  # a Feishu answer takes none of the Slack-only fields
            for name in ("blocks", "text", "requester_user_id"):
                body.pop(name, None)
        if isinstance(body.get("card"), dict):
            body["card"] = CARD
        if str(body.get("platform_message_id") or "").strip():
            body["platform_message_id"] = f"om_{uuid.uuid4().hex}"
            body["card_id"] = f"card_{uuid.uuid4().hex}"
        options = body.get("feedback_options")
        if isinstance(options, dict):
            for kind in ("buttons", "reasons"):
                for i, item in enumerate(options.get(kind) or []):
                    item["key"] = f"{i}{item['key']}"[:64]
            if options.get("reasons") and not any(
                b.get("semantic") == "negative" for b in options.get("buttons") or []
            ):
                options["reasons"] = []
    elif path == "/api/v1/interactions" and method == "POST" and isinstance(body, dict):
        from interactions import kinds

        channel = kinds.normalize(body.get("channel")) if body.get("channel") else None
        if channel is not None:  # the schema's names; the server also takes any case
            body["channel"] = channel
        # people are named by their id on the interaction's channel
        person = {kinds.SLACK: "U0FUZZUSER", kinds.TELEGRAM: "4242"}.get(channel, "ou_fuzz")
        if body.get("requester_open_id"):
            body["requester_open_id"] = person
        if body.get("allowed_open_ids"):
            body["allowed_open_ids"] = [person]
        for i, action in enumerate(body.get("actions") or []):
            action["id"] = f"a{i}_{action['id']}"[:32]
            if "value" in action:
                action["value"] = f"{i}:{action['value']}"[:200]
        for i, action in enumerate(body.get("actions") or []):
            action["label"] = _visible(action.get("label"), i)
        for i, field in enumerate(body.get("fields") or []):
            field["name"] = f"f{i}_{field['name']}"[:31]
            if "label" in field:
                field["label"] = _visible(field["label"], i)
            for j, option in enumerate(field.get("options") or []):
                option["label"] = _visible(option.get("label"), j)
    elif path.endswith("/asks") and method == "POST" and isinstance(body, dict):
        if not str(body.get("requester_open_id") or "").strip():
            body["requester_open_id"] = "ou_fuzz_requester"
        for question in body.get("questions") or []:
            for i, option in enumerate(question.get("options") or []):
                option["label"] = f"{i}:{option['label']}"[:60]


def _progress_in_line(session_id, body: dict) -> None:
    from interactions import channels, kinds
    from interactions.models import ProgressSession

    first = ProgressSession.objects.filter(session_id=str(session_id or "")).first()
    channel = body.get("channel", kinds.FEISHU)
    if first is not None:
        channel = first.channel
    elif not channels.get(channel).shows_progress:
        channel = kinds.FEISHU
    body["channel"] = channel
    chat = {kinds.FEISHU: "oc_fuzz_chat", kinds.SLACK: "C0FUZZCHAN", kinds.TELEGRAM: "424242"}
    if channel != kinds.FEISHU:
        body.pop("open_id", None)
        if body.get("requester_open_id"):
            body["requester_open_id"] = "U0FUZZUSER" if channel == kinds.SLACK else "4242"
        if body.get("chat_id") is not None:
            body["chat_id"] = chat[channel]
    if not any(str(body.get(k) or "").strip() for k in ("chat_id", "open_id")):
        body["chat_id"] = chat[channel]


def _visible(label, i: int) -> str:
    """`label` with a visible first character, no longer than it was: a required label is
    stripped of whitespace before it is checked, and Python's whitespace includes characters
    (U+001C–U+001F) that the schema's patterns cannot exclude."""
    text = str(label or "")
    return (f"{i}" + text)[: max(len(text), 1)]


def _holds_the_request(wait) -> bool:
    """True for a `wait` the server would accept and then hold for that long: a number in
    (0, 60], or a string that parses as one (negative mode sends strings, and "59" is valid)."""
    if isinstance(wait, bool):
        return False
    try:
        seconds = float(wait)
    except (TypeError, ValueError):
        return False
    return 0 < seconds <= 60


def _call(case, authorization: str) -> None:
    if case.meta is not None and case.meta.generation.mode.is_positive:
        _meet_rules_stated_in_words(case)
    query = case.query or {}
    if _holds_the_request(query.get("wait")):
        query["wait"] = 0
    case.call_and_validate(headers={"Authorization": authorization})


@bot_api.parametrize()
@FUZZ
def test_every_bot_api_answer_matches_the_schema(case, bot_key):
    _call(case, bot_key)


@analytics_api.parametrize()
@FUZZ
def test_every_analytics_answer_matches_the_schema(case, manager_token):
    _call(case, manager_token)
