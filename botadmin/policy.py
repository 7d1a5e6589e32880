"""Feedback policy layers: schema, validation and the resolver. Pure functions, no ORM.

A *layer* is a partial policy stored on a team, a bot or a (bot, chat) pair; it holds only the
fields that layer sets (snake_case JSON):

```
{"enabled": bool,
 "visible_semantics": ["positive", "progress", "negative"],      # 1–3 unique
 "buttons": [{"key", "label", "label_en", "semantic", "style"}],  # 2–4
 "negative_followup": {"reasons": [{"key", "label", "label_en"}], # 0–6
                       "comment": {"enabled", "required", "placeholder", "placeholder_en",
                                   "max_length"}},
 "allow_reselect": bool,
 "audience": "requester" | "reviewers" | "everyone",
 "reviewers": ["ou_…", …],                                        # ≤50, iff audience=reviewers
 "agent_options": "off" | "buttons" | "buttons_and_reasons"}
```

`label` and `placeholder` are the main form (shown in the bot's card language and wherever no
English form is set); `label_en` / `placeholder_en` are optional English forms with the same
limits, shown to English readers (Feishu clients in English, the English admin and dashboard).
`agent_options` says whether the bot backend may propose the buttons (and reasons) of one
answer in `POST /api/v1/deliveries` (`feedback_options`; see `agent_options_for`).

Rules and defaults:

- `validate_layer()` accepts arbitrary JSON and returns the layer unchanged (a deep copy) or
  raises `PolicyError` with every problem as a `(path, message)` pair such as
  `("buttons[2].key", "must match [a-z0-9_-]+")`. It never raises anything else. Layers are never
  filled with defaults (a saved partial layer reloads partial). A layer that sets
  `visible_semantics`, `buttons`, `negative_followup`, `audience` or `reviewers` must also be
  consistent once merged onto the defaults (so a layer that only makes sense with other
  layers is refused when saved, not when a card is sent).
- `resolve()` merges defaults < team < bot < chat: arrays replace whole, the fields of
  `negative_followup.comment` merge one by one, the last `enabled` wins, `api_only` means off, a
  chat bound to two teams fails closed (`ambiguous_team`). It returns a `Resolution` with the
  full normalized policy, the source layer of every field and the reason.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

# ---------------------------------------------------------------------------------------------
# Schema constants
# ---------------------------------------------------------------------------------------------

SEMANTICS: tuple[str, ...] = ("positive", "progress", "negative")
STYLES: tuple[str, ...] = ("primary", "default", "danger")
AUDIENCES: tuple[str, ...] = ("requester", "reviewers", "everyone")
#: What the bot backend may propose per answer: nothing, the buttons, or buttons and reasons.
AGENT_OPTIONS: tuple[str, ...] = ("off", "buttons", "buttons_and_reasons")

#: Layer names in merge order (later wins); `default` is the built-in base.
LAYERS: tuple[str, ...] = ("team", "bot", "chat")

VISIBLE_SEMANTICS_MIN, VISIBLE_SEMANTICS_MAX = 1, 3
BUTTONS_MIN, BUTTONS_MAX = 2, 4
BUTTON_LABEL_MAX = 24
REASONS_MAX = 6
REASON_LABEL_MAX = 32
PLACEHOLDER_MAX = 100
COMMENT_MAX_LENGTH_MIN, COMMENT_MAX_LENGTH_MAX = 1, 2000
REVIEWERS_MAX = 50
#: Our own bound (not in the reference): keys travel in every callback value.
KEY_MAX = 64
#: `open_id`s are `ou_…`; 64 characters is the width of every open_id column.
OPEN_ID_MAX = 64

KEY_RE = re.compile(r"[a-z0-9_-]+")
OPEN_ID_RE = re.compile(r"ou_[A-Za-z0-9_-]+")

LAYER_FIELDS = frozenset(
    {
        "enabled",
        "visible_semantics",
        "buttons",
        "negative_followup",
        "allow_reselect",
        "audience",
        "reviewers",
        "agent_options",
    }
)
BUTTON_FIELDS = frozenset({"key", "label", "label_en", "semantic", "style"})
FOLLOWUP_FIELDS = frozenset({"reasons", "comment"})
REASON_FIELDS = frozenset({"key", "label", "label_en"})
COMMENT_FIELDS = frozenset({"enabled", "required", "placeholder", "placeholder_en", "max_length"})

#: Every field path of an effective policy, in display order; `Resolution.sources` has them all.
FIELD_PATHS: tuple[str, ...] = (
    "enabled",
    "visible_semantics",
    "buttons",
    "negative_followup.reasons",
    "negative_followup.comment.enabled",
    "negative_followup.comment.required",
    "negative_followup.comment.placeholder",
    "negative_followup.comment.placeholder_en",
    "negative_followup.comment.max_length",
    "allow_reselect",
    "audience",
    "reviewers",
    "agent_options",
)

DEFAULT_COMMENT_PLACEHOLDER = "可以补充哪里需要改进"
DEFAULT_COMMENT_PLACEHOLDER_EN = "What could be improved?"

_DEFAULT_POLICY: dict[str, Any] = {
    "enabled": False,
    "visible_semantics": ["positive", "progress", "negative"],
    "buttons": [
        {
            "key": "conclusive_usable",
            "label": "结论可用",
            "label_en": "Usable conclusion",
            "semantic": "positive",
            "style": "primary",
        },
        {
            "key": "effective_progress",
            "label": "有效推进",
            "label_en": "Real progress",
            "semantic": "progress",
            "style": "default",
        },
        {
            "key": "incorrect",
            "label": "结论有误",
            "label_en": "Incorrect",
            "semantic": "negative",
            "style": "danger",
        },
    ],
    "negative_followup": {
        "reasons": [],
        "comment": {
            "enabled": True,
            "required": False,
            "placeholder": DEFAULT_COMMENT_PLACEHOLDER,
            "placeholder_en": DEFAULT_COMMENT_PLACEHOLDER_EN,
            "max_length": 1000,
        },
    },
    "allow_reselect": False,
    "audience": "requester",
    "reviewers": [],
    "agent_options": "off",
}


def default_policy() -> dict[str, Any]:
    """A fresh deep copy of the built-in policy (feedback off)."""
    return copy.deepcopy(_DEFAULT_POLICY)


def default_style(semantic: str) -> str:
    """The style of a button that sets none: `primary` for positive, else `default`."""
    return "primary" if semantic == "positive" else "default"


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class PolicyError(ValueError):
    """A layer (or a merged policy) breaks the schema.

    `errors` is a list of `(path, message)` pairs; `path` is dotted with list indexes
    (`buttons[2].key`, `negative_followup.comment.max_length`) or "" for the layer itself.
    Messages are translated in the language active when validation ran.
    """

    def __init__(self, errors: Iterable[tuple[str, str]]):
        self.errors: list[tuple[str, str]] = [(p, str(m)) for p, m in errors]
        super().__init__("; ".join(_format(p, m) for p, m in self.errors))

    def as_dict(self) -> dict[str, list[str]]:
        """`{path: [message, …]}` in first-seen order (the API's `detail` shape)."""
        out: dict[str, list[str]] = {}
        for path, message in self.errors:
            out.setdefault(path, []).append(message)
        return out

    def messages(self) -> list[str]:
        """`["buttons[2].key: must match [a-z0-9_-]+", …]`."""
        return [_format(p, m) for p, m in self.errors]


def _format(path: str, message: str) -> str:
    return f"{path}: {message}" if path else message


#: Letters that render as nothing (Hangul fillers, the blank Braille pattern).
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
#: Bidirectional embeddings, overrides and isolates: they reorder the text around them.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _visible(text: str) -> bool:
    """Whether `text` has a character a person can see: not white space, not a format or
    combining character alone (U+200B, U+0301), not a blank letter (U+3164, U+2800)."""
    return any(
        not c.isspace()
        and c not in _BLANK_LETTERS
        and unicodedata.category(c) not in ("Cf", "Mn", "Me", "Zl", "Zp")
        for c in text
    )


def _has_control(text: str) -> bool:
    """Control characters (C0/C1, NUL), lone surrogates, line/paragraph separators and
    bidirectional controls: nothing a one-line label on a card should carry."""
    return any(
        unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or c in _BIDI_CONTROLS for c in text
    )


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


class _Checker:
    """Collects `(path, message)` pairs while walking one layer."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    # -- primitives -------------------------------------------------------------------------

    def object(self, value: Any, path: str, allowed: frozenset[str]) -> bool:
        if not isinstance(value, Mapping):
            self.add(path, _("must be an object"))
            return False
        for name in value:
            if not isinstance(name, str):
                self.add(
                    path, _("field names must be strings, got %(name)s") % {"name": _describe(name)}
                )
            elif name not in allowed:
                self.add(_join(path, name), _("unknown field"))
        return True

    def boolean(self, value: Any, path: str) -> None:
        if not isinstance(value, bool):
            self.add(path, _("must be true or false"))

    def text(self, value: Any, path: str, max_len: int) -> None:
        """A label or placeholder shown on cards: 1–`max_len` characters, something visible
        (`_visible`: not only spaces, zero-width or blank characters) and no control
        characters (`_has_control`: NUL, newlines, escapes, bidi overrides; PostgreSQL's
        jsonb cannot store NUL, and a card shows none of them) nor lone surrogates."""
        if not isinstance(value, str) or not (1 <= len(value) <= max_len) or not _visible(value):
            self.add(
                path,
                _("must be a non-blank string of 1 to %(max)d characters") % {"max": max_len},
            )
        elif _has_control(value):
            self.add(path, _("must not contain control characters"))

    def key(self, value: Any, path: str, seen: set[str]) -> None:
        if not isinstance(value, str) or not KEY_RE.fullmatch(value):
            self.add(path, _("must match [a-z0-9_-]+"))
        elif len(value) > KEY_MAX:
            self.add(path, _("must be at most %(max)d characters") % {"max": KEY_MAX})
        elif value in seen:
            self.add(path, _("duplicate key %(key)s") % {"key": value})
        else:
            seen.add(value)

    def choice(self, value: Any, path: str, choices: tuple[str, ...]) -> None:
        if not isinstance(value, str) or value not in choices:
            self.add(path, _("must be one of %(choices)s") % {"choices": ", ".join(choices)})

    def array(self, value: Any, path: str, lo: int, hi: int, what: str) -> bool:
        if not isinstance(value, list):
            self.add(
                path,
                _("must be a list of %(lo)d to %(hi)d %(what)s")
                % {"lo": lo, "hi": hi, "what": what},
            )
            return False
        if not lo <= len(value) <= hi:
            self.add(
                path,
                _("must have %(lo)d to %(hi)d %(what)s, got %(n)d")
                % {"lo": lo, "hi": hi, "what": what, "n": len(value)},
            )
        return True

    # -- parts of a layer --------------------------------------------------------------------

    def visible_semantics(self, value: Any) -> None:
        path = "visible_semantics"
        if not self.array(
            value, path, VISIBLE_SEMANTICS_MIN, VISIBLE_SEMANTICS_MAX, _("semantics")
        ):
            return
        seen: set[str] = set()
        for i, item in enumerate(value):
            item_path = f"{path}[{i}]"
            if not isinstance(item, str) or item not in SEMANTICS:
                self.choice(item, item_path, SEMANTICS)
            elif item in seen:
                self.add(item_path, _("duplicate semantic %(semantic)s") % {"semantic": item})
            else:
                seen.add(item)

    def buttons(self, value: Any) -> None:
        path = "buttons"
        if not self.array(value, path, BUTTONS_MIN, BUTTONS_MAX, _("buttons")):
            return
        seen: set[str] = set()
        for i, button in enumerate(value):
            bpath = f"{path}[{i}]"
            if not self.object(button, bpath, BUTTON_FIELDS):
                continue
            for required in ("key", "label", "semantic"):
                if required not in button:
                    self.add(_join(bpath, required), _("is required"))
            if "key" in button:
                self.key(button["key"], f"{bpath}.key", seen)
            for name in ("label", "label_en"):
                if name in button:
                    self.text(button[name], f"{bpath}.{name}", BUTTON_LABEL_MAX)
            if "semantic" in button:
                self.choice(button["semantic"], f"{bpath}.semantic", SEMANTICS)
            if "style" in button:
                self.choice(button["style"], f"{bpath}.style", STYLES)

    def reasons(self, reasons: Any, rpath: str) -> None:
        if self.array(reasons, rpath, 0, REASONS_MAX, _("reasons")):
            seen: set[str] = set()
            for i, reason in enumerate(reasons):
                ipath = f"{rpath}[{i}]"
                if not self.object(reason, ipath, REASON_FIELDS):
                    continue
                for required in ("key", "label"):
                    if required not in reason:
                        self.add(_join(ipath, required), _("is required"))
                if "key" in reason:
                    self.key(reason["key"], f"{ipath}.key", seen)
                for name in ("label", "label_en"):
                    if name in reason:
                        self.text(reason[name], f"{ipath}.{name}", REASON_LABEL_MAX)

    def negative_followup(self, value: Any) -> None:
        path = "negative_followup"
        if not self.object(value, path, FOLLOWUP_FIELDS):
            return
        if "reasons" in value:
            self.reasons(value["reasons"], f"{path}.reasons")
        if "comment" in value:
            cpath = f"{path}.comment"
            comment = value["comment"]
            if self.object(comment, cpath, COMMENT_FIELDS):
                for flag in ("enabled", "required"):
                    if flag in comment:
                        self.boolean(comment[flag], f"{cpath}.{flag}")
                for name in ("placeholder", "placeholder_en"):
                    if name in comment:
                        self.text(comment[name], f"{cpath}.{name}", PLACEHOLDER_MAX)
                if "max_length" in comment:
                    n = comment["max_length"]
                    if (
                        isinstance(n, bool)
                        or not isinstance(n, int)
                        or not COMMENT_MAX_LENGTH_MIN <= n <= COMMENT_MAX_LENGTH_MAX
                    ):
                        self.add(
                            f"{cpath}.max_length",
                            _("must be an integer from %(lo)d to %(hi)d")
                            % {"lo": COMMENT_MAX_LENGTH_MIN, "hi": COMMENT_MAX_LENGTH_MAX},
                        )

    def reviewers(self, value: Any) -> None:
        path = "reviewers"
        if not self.array(value, path, 0, REVIEWERS_MAX, _("open_ids")):
            return
        seen: set[str] = set()
        for i, item in enumerate(value):
            ipath = f"{path}[{i}]"
            if (
                not isinstance(item, str)
                or len(item) > OPEN_ID_MAX
                or not OPEN_ID_RE.fullmatch(item)
            ):
                self.add(
                    ipath,
                    _("must be an open_id (ou_…, at most %(max)d characters)")
                    % {"max": OPEN_ID_MAX},
                )
            elif item in seen:
                self.add(ipath, _("duplicate open_id"))
            else:
                seen.add(item)


def _check_shape(layer: Any) -> list[tuple[str, str]]:
    """Schema errors of one layer on its own (types, limits, unknown fields)."""
    c = _Checker()
    if not c.object(layer, "", LAYER_FIELDS):
        return c.errors
    if "enabled" in layer:
        c.boolean(layer["enabled"], "enabled")
    if "visible_semantics" in layer:
        c.visible_semantics(layer["visible_semantics"])
    if "buttons" in layer:
        c.buttons(layer["buttons"])
    if "negative_followup" in layer:
        c.negative_followup(layer["negative_followup"])
    if "allow_reselect" in layer:
        c.boolean(layer["allow_reselect"], "allow_reselect")
    if "audience" in layer:
        c.choice(layer["audience"], "audience", AUDIENCES)
    if "reviewers" in layer:
        c.reviewers(layer["reviewers"])
    if "agent_options" in layer:
        c.choice(layer["agent_options"], "agent_options", AGENT_OPTIONS)
    return c.errors


def check_consistency(
    policy: Mapping[str, Any], layer: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Cross-field problems of a *full* policy (defaults already merged in).

    Rules: each visible semantic has ≥1 button; no button uses a hidden
    semantic; reasons only when negative is visible; a required comment must be enabled;
    `audience` `reviewers` needs ≥1 reviewer and a reviewer list needs that audience.

    With `layer` given (the partial layer being validated), only the rules that layer touches are
    checked, and each problem is reported at the path the layer set; without it every rule is
    checked (used on the effective policy). Returns `[(path, message), …]`; never raises for a
    policy that passed the shape checks.
    """
    sets = (
        (lambda *names: True) if layer is None else (lambda *names: any(n in layer for n in names))
    )
    followup = layer.get("negative_followup", {}) if layer is not None else {}
    followup = followup if isinstance(followup, Mapping) else {}
    errors: list[tuple[str, str]] = []
    visible = list(policy["visible_semantics"])
    buttons = policy["buttons"]

    if sets("visible_semantics", "buttons"):
        for semantic in SEMANTICS:
            if semantic in visible and not any(b["semantic"] == semantic for b in buttons):
                where = "buttons" if layer is None or "buttons" in layer else "visible_semantics"
                errors.append(
                    (
                        where,
                        _("semantic %(semantic)s is visible but has no button")
                        % {"semantic": semantic},
                    )
                )
        for i, button in enumerate(buttons):
            if button["semantic"] not in visible:
                where = (
                    f"buttons[{i}].semantic"
                    if layer is None or "buttons" in layer
                    else "visible_semantics"
                )
                errors.append(
                    (
                        where,
                        _("button %(key)s uses the hidden semantic %(semantic)s")
                        % {"key": button["key"], "semantic": button["semantic"]},
                    )
                )
    if (
        (layer is None or "visible_semantics" in layer or "reasons" in followup)
        and policy["negative_followup"]["reasons"]
        and "negative" not in visible
    ):
        where = (
            "negative_followup.reasons"
            if layer is None or "reasons" in followup
            else "visible_semantics"
        )
        errors.append((where, _("reasons need the negative semantic to be visible")))
    comment = policy["negative_followup"]["comment"]
    if (layer is None or "comment" in followup) and comment["required"] and not comment["enabled"]:
        errors.append(
            (
                "negative_followup.comment.required",
                _("cannot be true while the comment is disabled"),
            )
        )
    if sets("audience", "reviewers"):
        if policy["audience"] == "reviewers" and not policy["reviewers"]:
            errors.append(
                ("reviewers", _("must list at least one open_id when audience is reviewers"))
            )
        if layer is not None and policy["audience"] != "reviewers" and policy["reviewers"]:
            errors.append(("reviewers", _("must be empty unless audience is reviewers")))
    return errors


def validate_layer(layer: Any) -> dict[str, Any]:
    """Validate one partial layer and return a deep copy of it, unchanged (never defaulted).

    Accepts any value (decoded JSON). Raises `PolicyError` listing every problem; never raises
    another exception. `{}` is valid (inherit everything).
    """
    try:
        errors = _check_shape(layer)
        if not errors:
            errors = check_consistency(_overlay(default_policy(), layer)[0], layer)
    except RecursionError:  # absurdly deep input from a hand-written JSON body
        errors = [("", _("is nested too deeply"))]
    if errors:
        raise PolicyError(errors)
    return copy.deepcopy(dict(layer))


def is_valid_layer(layer: Any) -> bool:
    """True when `validate_layer(layer)` would succeed."""
    try:
        validate_layer(layer)
    except PolicyError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Resolver
# ---------------------------------------------------------------------------------------------

REASON_ENABLED = "enabled"
REASON_DISABLED = "disabled"
REASON_API_ONLY = "api_only"
REASON_AMBIGUOUS_TEAM = "ambiguous_team"
#: Cardloop addition to the reference's four reasons: every layer is valid on its own but the
#: merged policy is not (e.g. the team hides a semantic a chat's buttons use). Fails closed.
REASON_INVALID_POLICY = "invalid_policy"
REASONS: tuple[str, ...] = (
    REASON_ENABLED,
    REASON_DISABLED,
    REASON_API_ONLY,
    REASON_AMBIGUOUS_TEAM,
    REASON_INVALID_POLICY,
)


@dataclass(frozen=True)
class Resolution:
    """The effective policy for one (bot, chat) and how it came about.

    - `policy`: the full normalized policy (every field; buttons carry a style). `policy["enabled"]`
      equals `enabled`, so the dict can be frozen as a delivery's policy snapshot as it is.
    - `sources`: every path of `FIELD_PATHS` → `"default" | "team" | "bot" | "chat"`.
    - `reason`: `enabled | disabled | api_only | ambiguous_team | invalid_policy`.
    - `layer_enabled`: the merged `enabled` value before `api_only` / `ambiguous_team` /
      `invalid_policy` turned feedback off.
    - `problems`: `(path, message)` pairs for stored layers that fail validation (path prefixed
      with the layer name, e.g. `chat.buttons`) and for an inconsistent merged policy.
    - `layers`: layer name → a copy of the stored layer merged (None when there is none or it
      failed validation).
    - `team` / `teams`: set by `botadmin.services.effective_policy_for`: the chat's single team
      (None when it has none or several) and every team the chat is bound to.
    """

    policy: dict[str, Any]
    sources: dict[str, str]
    reason: str
    layer_enabled: bool = False
    problems: tuple[tuple[str, str], ...] = ()
    layers: dict[str, Any] = field(default_factory=dict)
    team: Any = None
    teams: tuple[Any, ...] = ()

    @property
    def enabled(self) -> bool:
        """True when feedback buttons are shown."""
        return self.reason == REASON_ENABLED


def _overlay(
    policy: dict[str, Any],
    layer: Mapping[str, Any],
    name: str = "layer",
    sources: dict | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Apply one shape-valid layer onto a full policy in place; record sources."""
    sources = sources if sources is not None else {}
    for key, value in layer.items():
        if key == "negative_followup":
            if "reasons" in value:
                policy[key]["reasons"] = copy.deepcopy(value["reasons"])
                sources["negative_followup.reasons"] = name
            comment = value.get("comment", {})
            for ckey, cvalue in comment.items():
                policy[key]["comment"][ckey] = cvalue
                sources[f"negative_followup.comment.{ckey}"] = name
            if "placeholder" in comment and "placeholder_en" not in comment:
                # a new main wording: the inherited English form translated the old one
                policy[key]["comment"].pop("placeholder_en", None)
                sources["negative_followup.comment.placeholder_en"] = name
        else:
            policy[key] = copy.deepcopy(value)
            sources[key] = name
    return policy, sources


def resolve(
    team: Any = None,
    bot: Any = None,
    chat: Any = None,
    *,
    api_only: bool = False,
    ambiguous_team: bool = False,
) -> Resolution:
    """Merge built-in defaults < `team` < `bot` < `chat` (each a stored layer or None).

    `api_only=True` (the bot's flag) or `ambiguous_team=True` (the chat is bound to several
    teams; pass `team=None`) turn feedback off whatever the layers say. A stored layer that fails
    validation is skipped and listed in `problems`; a merged policy that breaks a cross-field
    rule is off with reason `invalid_policy`. Never raises for any layer value.
    """
    policy = default_policy()
    sources = {path: "default" for path in FIELD_PATHS}
    problems: list[tuple[str, str]] = []
    layers = {"team": team, "bot": bot, "chat": chat}
    used: dict[str, Any] = dict.fromkeys(LAYERS)
    for name in LAYERS:
        layer = layers[name]
        if layer is None:
            continue
        try:
            valid = validate_layer(layer)
        except PolicyError as exc:
            problems.extend((_join(name, p), m) for p, m in exc.errors)
            continue
        used[name] = valid
        _overlay(policy, valid, name, sources)

    for button in policy["buttons"]:
        button.setdefault("style", default_style(button["semantic"]))
    if policy["audience"] != "reviewers" and policy["reviewers"]:
        # A later layer chose another audience: the inherited list no longer applies.
        policy["reviewers"] = []
        sources["reviewers"] = sources["audience"]
    problems.extend(check_consistency(policy))

    layer_enabled = policy["enabled"] is True
    if api_only:
        reason = REASON_API_ONLY
    elif ambiguous_team:
        reason = REASON_AMBIGUOUS_TEAM
    elif not layer_enabled:
        reason = REASON_DISABLED
    elif problems:
        reason = REASON_INVALID_POLICY
    else:
        reason = REASON_ENABLED
    policy["enabled"] = reason == REASON_ENABLED
    return Resolution(
        policy=policy,
        sources=sources,
        reason=reason,
        layer_enabled=layer_enabled,
        problems=tuple(problems),
        layers=used,
    )


def field_value(policy: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted `path` of `FIELD_PATHS` in a full policy (None for an optional
    field the policy does not hold, such as a dropped `placeholder_en`)."""
    value: Any = policy
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


# ---------------------------------------------------------------------------------------------
# Options the bot backend proposes for one answer
# ---------------------------------------------------------------------------------------------

AGENT_OPTION_FIELDS = frozenset({"buttons", "reasons"})

#: What `apply_agent_options` used of the proposal.
USED_NONE, USED_BUTTONS, USED_BUTTONS_AND_REASONS = "none", "buttons", "buttons_and_reasons"
#: Why (part of) a proposal was not used.
IGNORED_OFF = "agent_options_off"
IGNORED_REASONS = "reasons_not_allowed"
IGNORED_NOT_SHOWN = "feedback_not_shown"
IGNORED_INCONSISTENT = "not_consistent"


def validate_agent_options(value: Any) -> dict[str, Any]:
    """Validate the `feedback_options` a bot backend proposes for one answer:
    `{"buttons": [2–4 buttons], "reasons": [0–6 reasons]?}` with exactly the limits of a layer's
    `buttons` and `negative_followup.reasons` (keys `[a-z0-9_-]+` ≤ 64, unique; labels and
    `label_en` 1–24 / 1–32 visible characters; semantics positive | progress | negative), and
    reasons only beside a negative button. Returns a deep copy; raises `PolicyError` with
    paths relative to the object (`buttons[1].label`)."""
    c = _Checker()
    try:
        if c.object(value, "", AGENT_OPTION_FIELDS):
            if "buttons" not in value:
                c.add("buttons", _("is required"))
            else:
                c.buttons(value["buttons"])
            if "reasons" in value:
                c.reasons(value["reasons"], "reasons")
            if (
                not c.errors
                and value.get("reasons")
                and not any(b["semantic"] == "negative" for b in value["buttons"])
            ):
                c.add("reasons", _("reasons need a button with the negative semantic"))
    except RecursionError:
        c.errors = [("", _("is nested too deeply"))]
    if c.errors:
        raise PolicyError(c.errors)
    return copy.deepcopy(dict(value))


def apply_agent_options(
    policy: Mapping[str, Any], options: Mapping[str, Any] | None, *, shown: bool
) -> tuple[dict[str, Any], str, str]:
    """The policy one answer's feedback area uses, given the backend's validated proposal.

    Returns `(policy, used, ignored)`: `used` is `none | buttons | buttons_and_reasons`;
    `ignored` says why a proposal (or its reasons) was not used: `agent_options_off` (the
    effective policy's `agent_options`), `reasons_not_allowed` (`agent_options: buttons`: the
    buttons are used, the configured reasons stay), `feedback_not_shown` (no feedback area on
    this answer) or `not_consistent` (the proposed buttons break a rule of the effective
    policy, e.g. a button with a hidden semantic, or a visible semantic without a button; the
    configured options stay), else "". Proposed buttons without `style` get `default_style`.
    Pure; never raises for a validated proposal."""
    result = copy.deepcopy(dict(policy))
    if options is None:
        return result, USED_NONE, ""
    if not shown:
        return result, USED_NONE, IGNORED_NOT_SHOWN
    mode = policy.get("agent_options", "off")
    if mode not in ("buttons", "buttons_and_reasons"):
        return result, USED_NONE, IGNORED_OFF
    result["buttons"] = [
        {**b, "style": b.get("style") or default_style(b["semantic"])}
        for b in copy.deepcopy(options["buttons"])
    ]
    used, ignored = USED_BUTTONS, ""
    if "reasons" in options:
        if mode == "buttons_and_reasons":
            result["negative_followup"]["reasons"] = copy.deepcopy(options["reasons"])
            used = USED_BUTTONS_AND_REASONS
        else:
            ignored = IGNORED_REASONS
    if check_consistency(result):
        return copy.deepcopy(dict(policy)), USED_NONE, IGNORED_INCONSISTENT
    return result, used, ignored
