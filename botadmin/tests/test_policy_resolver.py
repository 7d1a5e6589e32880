"""The resolver: defaults < team < bot < chat, and `effective_policy_for` over the database."""

from __future__ import annotations

import pytest

from botadmin import services
from botadmin.models import Chat, ChatPolicy, Team, TeamChat
from botadmin.policy import FIELD_PATHS, default_policy, resolve

TWO_BUTTONS = [
    {"key": "yes", "label": "Yes", "semantic": "positive"},
    {"key": "no", "label": "No", "semantic": "negative"},
]
TWO_VISIBLE = ["positive", "negative"]


def test_no_layers_gives_the_defaults_with_feedback_off():
    r = resolve()
    assert r.reason == "disabled" and r.enabled is False
    assert r.policy == default_policy()
    assert r.sources == {path: "default" for path in FIELD_PATHS}
    assert r.problems == ()


def test_sources_cover_every_field_path_including_comment_fields():
    assert set(resolve().sources) == set(FIELD_PATHS)
    assert {
        "negative_followup.comment.enabled",
        "negative_followup.comment.required",
        "negative_followup.comment.placeholder",
        "negative_followup.comment.max_length",
    } <= set(FIELD_PATHS)


def test_team_turning_feedback_on_enables_it():
    r = resolve({"enabled": True})
    assert r.reason == "enabled" and r.enabled and r.policy["enabled"] is True
    assert r.sources["enabled"] == "team"


def test_last_enabled_wins_team_on_bot_off_chat_on_is_on():
    r = resolve({"enabled": True}, {"enabled": False}, {"enabled": True})
    assert r.enabled and r.sources["enabled"] == "chat"


def test_last_enabled_wins_team_on_bot_off_is_off():
    r = resolve({"enabled": True}, {"enabled": False}, {})
    assert r.reason == "disabled" and r.sources["enabled"] == "bot"
    assert r.policy["enabled"] is False


def test_later_layer_that_does_not_set_enabled_keeps_the_earlier_value():
    r = resolve({"enabled": True}, {"allow_reselect": True}, {"audience": "everyone"})
    assert r.enabled and r.sources["enabled"] == "team"
    assert r.sources["allow_reselect"] == "bot" and r.sources["audience"] == "chat"


def test_buttons_array_replaces_whole():
    four = [
        {"key": "a", "label": "A", "semantic": "positive"},
        {"key": "b", "label": "B", "semantic": "positive"},
        {"key": "c", "label": "C", "semantic": "progress"},
        {"key": "d", "label": "D", "semantic": "negative"},
    ]
    three = [
        {"key": "yes", "label": "Yes", "semantic": "positive"},
        {"key": "meh", "label": "Meh", "semantic": "progress"},
        {"key": "no", "label": "No", "semantic": "negative", "style": "danger"},
    ]
    r = resolve({"enabled": True, "buttons": four}, {"buttons": three})
    assert [b["key"] for b in r.policy["buttons"]] == ["yes", "meh", "no"]
    assert r.sources["buttons"] == "bot" and r.sources["visible_semantics"] == "default"
    assert r.enabled


def test_visible_semantics_array_replaces_whole():
    team = {"visible_semantics": ["positive", "negative"], "buttons": TWO_BUTTONS}
    chat = {
        "visible_semantics": ["positive"],
        "buttons": [
            {"key": "ok", "label": "OK", "semantic": "positive"},
            {"key": "great", "label": "Great", "semantic": "positive"},
        ],
    }
    r = resolve(team, None, chat)
    assert r.policy["visible_semantics"] == ["positive"]  # not the union with the team's
    assert r.sources["visible_semantics"] == "chat"
    assert r.problems == ()


def test_reasons_replace_whole():
    team = {
        "negative_followup": {"reasons": [{"key": "a", "label": "A"}, {"key": "b", "label": "B"}]}
    }
    chat = {"negative_followup": {"reasons": [{"key": "c", "label": "C"}]}}
    r = resolve(team, None, chat)
    assert r.policy["negative_followup"]["reasons"] == [{"key": "c", "label": "C"}]
    assert r.sources["negative_followup.reasons"] == "chat"


def test_empty_reasons_on_a_later_layer_clear_inherited_reasons():
    team = {"negative_followup": {"reasons": [{"key": "a", "label": "A"}]}}
    r = resolve(team, {"negative_followup": {"reasons": []}})
    assert r.policy["negative_followup"]["reasons"] == []
    assert r.sources["negative_followup.reasons"] == "bot"


def test_comment_merges_field_by_field():
    r = resolve(
        {"negative_followup": {"comment": {"placeholder": "Why?", "max_length": 300}}},
        {"negative_followup": {"comment": {"max_length": 500}}},
        {"negative_followup": {"comment": {"required": True}}},
    )
    assert r.policy["negative_followup"]["comment"] == {
        "enabled": True,
        "required": True,
        "placeholder": "Why?",
        "max_length": 500,
    }
    assert r.sources["negative_followup.comment.enabled"] == "default"
    assert r.sources["negative_followup.comment.placeholder"] == "team"
    assert r.sources["negative_followup.comment.max_length"] == "bot"
    assert r.sources["negative_followup.comment.required"] == "chat"


def test_setting_comment_does_not_touch_inherited_reasons():
    team = {"negative_followup": {"reasons": [{"key": "a", "label": "A"}]}}
    r = resolve(team, {"negative_followup": {"comment": {"required": True}}})
    assert r.policy["negative_followup"]["reasons"] == [{"key": "a", "label": "A"}]
    assert r.sources["negative_followup.reasons"] == "team"


def test_effective_buttons_carry_a_style_by_semantic_when_none_is_set():
    r = resolve({"visible_semantics": TWO_VISIBLE, "buttons": TWO_BUTTONS})
    assert [b["style"] for b in r.policy["buttons"]] == ["primary", "default"]


def test_api_only_is_always_off():
    r = resolve({"enabled": True}, {"enabled": True}, {"enabled": True}, api_only=True)
    assert r.reason == "api_only" and not r.enabled
    assert r.policy["enabled"] is False
    assert r.layer_enabled is True


def test_ambiguous_team_is_off_even_when_bot_and_chat_enable():
    r = resolve(None, {"enabled": True}, {"enabled": True}, ambiguous_team=True)
    assert r.reason == "ambiguous_team" and not r.enabled and r.policy["enabled"] is False


def test_merge_that_breaks_a_rule_fails_closed_with_the_problem_listed():
    team = {"enabled": True, "visible_semantics": TWO_VISIBLE, "buttons": TWO_BUTTONS}
    chat = {"visible_semantics": ["positive", "progress", "negative"]}
    r = resolve(team, None, chat)
    assert r.reason == "invalid_policy" and not r.enabled
    assert ("buttons", "semantic progress is visible but has no button") in r.problems


def test_a_stored_layer_that_fails_validation_is_skipped_listed_and_fails_closed():
    r = resolve({"enabled": True}, {"buttons": "nope"}, None)
    assert r.reason == "invalid_policy"
    assert ("bot.buttons", "must be a list of 2 to 4 buttons") in r.problems
    assert r.sources["buttons"] == "default"


def test_inherited_reviewers_are_dropped_when_a_later_layer_picks_another_audience():
    team = {"enabled": True, "audience": "reviewers", "reviewers": ["ou_a", "ou_b"]}
    r = resolve(team, None, {"audience": "everyone"})
    assert r.enabled
    assert r.policy["audience"] == "everyone" and r.policy["reviewers"] == []
    assert r.sources["reviewers"] == "chat"


def test_reviewers_from_one_layer_and_audience_from_another_combine():
    # each layer is valid on its own only with both fields; a later layer may narrow the list
    team = {"enabled": True, "audience": "reviewers", "reviewers": ["ou_a", "ou_b"]}
    bot = {"audience": "reviewers", "reviewers": ["ou_c"]}
    r = resolve(team, bot)
    assert r.policy["reviewers"] == ["ou_c"] and r.sources["reviewers"] == "bot"


def test_resolution_policy_is_a_deep_copy_of_the_layers():
    team = {
        "enabled": True,
        "visible_semantics": TWO_VISIBLE,
        "buttons": [dict(b) for b in TWO_BUTTONS],
    }
    r = resolve(team)
    r.policy["buttons"][0]["label"] = "mutated"
    assert team["buttons"][0]["label"] == "Yes"
    assert resolve().policy["buttons"][0]["label"] == "结论可用"


# --- effective_policy_for (database) ---------------------------------------------------------


@pytest.fixture
def world(db, make_bot):
    team = Team.objects.create(name="Alpha", policy={"enabled": True, "allow_reselect": True})
    other = Team.objects.create(name="Beta", policy={"enabled": True})
    bot = make_bot(app_id="cli_a", policy={"negative_followup": {"comment": {"max_length": 500}}})
    chat = Chat.objects.create(chat_id="oc_alpha", name="alpha")
    TeamChat.objects.create(team=team, chat=chat)
    return {"team": team, "other": other, "bot": bot, "chat": chat}


def test_chat_takes_its_teams_layer_and_exposes_the_team(world):
    r = services.effective_policy_for(world["bot"], world["chat"])
    assert r.enabled and r.team == world["team"] and r.teams == (world["team"],)
    assert r.sources["allow_reselect"] == "team"
    assert r.sources["negative_followup.comment.max_length"] == "bot"


def test_chat_can_be_given_by_chat_id(world):
    r = services.effective_policy_for(world["bot"], "oc_alpha")
    assert r.enabled and r.team == world["team"]


def test_unknown_chat_id_counts_as_no_team_and_no_chat_policy(world):
    r = services.effective_policy_for(world["bot"], "oc_unknown")
    assert r.reason == "disabled" and r.team is None and r.teams == ()


def test_no_chat_uses_only_the_bot_layer(world):
    r = services.effective_policy_for(world["bot"], None)
    assert r.reason == "disabled" and r.team is None


def test_chat_policy_overrides_team_and_bot(world):
    ChatPolicy.objects.create(bot=world["bot"], chat=world["chat"], policy={"enabled": False})
    r = services.effective_policy_for(world["bot"], world["chat"])
    assert r.reason == "disabled" and r.sources["enabled"] == "chat"


def test_chat_policy_is_scoped_to_its_bot(world, make_bot):
    other_bot = make_bot(app_id="cli_b")
    ChatPolicy.objects.create(bot=other_bot, chat=world["chat"], policy={"enabled": False})
    assert services.effective_policy_for(world["bot"], world["chat"]).enabled
    assert not services.effective_policy_for(other_bot, world["chat"]).enabled


def test_chat_bound_to_two_teams_fails_closed_with_ambiguous_team(world):
    TeamChat.objects.create(team=world["other"], chat=world["chat"])
    ChatPolicy.objects.create(bot=world["bot"], chat=world["chat"], policy={"enabled": True})
    r = services.effective_policy_for(world["bot"], world["chat"])
    assert r.reason == "ambiguous_team" and not r.enabled
    assert r.team is None and set(r.teams) == {world["team"], world["other"]}
    assert "team" not in r.sources.values()


def test_api_only_bot_is_off_in_an_enabled_team_chat(world):
    world["bot"].api_only = True
    world["bot"].save()
    r = services.effective_policy_for(world["bot"], world["chat"])
    assert r.reason == "api_only" and r.policy["enabled"] is False


def test_hand_edited_invalid_stored_layer_never_raises(world):
    Team.objects.filter(pk=world["team"].pk).update(policy={"enabled": "yes", "x": 1})
    world["chat"].refresh_from_db()
    r = services.effective_policy_for(world["bot"], world["chat"])
    assert r.reason == "disabled"
    assert {p for p, _m in r.problems} == {"team.enabled", "team.x"}
