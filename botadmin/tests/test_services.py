"""Service functions: each change is stored, audited (who, what, before → after) and nothing
secret ever reaches the database, the audit log or the API key table in clear."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading

import pytest
from django.db import connection

from botadmin import services
from botadmin.models import AuditEntry, Bot, BotApiKey, Chat, ChatPolicy, Team, TeamChat
from botadmin.policy import PolicyError
from plumbing.secretstore import secret_dir


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops", password="x")


@pytest.fixture
def bot(make_bot):
    return make_bot(app_id="cli_svc", name="svc bot")


@pytest.fixture
def team(db):
    return Team.objects.create(name="Ops team")


@pytest.fixture
def chat(db):
    return Chat.objects.create(chat_id="oc_svc", name="svc chat")


def entries(action=None):
    qs = AuditEntry.objects.order_by("id")
    return list(qs.filter(action=action) if action else qs)


# --- policy layers -------------------------------------------------------------------------


def test_saved_partial_layer_reloads_partial(ops, bot):
    layer = {"enabled": True, "negative_followup": {"comment": {"required": True}}}
    services.set_policy_layer(ops, bot, layer)
    assert Bot.objects.get(pk=bot.pk).policy == layer


def test_policy_change_writes_an_audit_entry_with_who_before_and_after(ops, team):
    services.set_policy_layer(ops, team, {"enabled": True})
    services.set_policy_layer(ops, team, {"enabled": False, "allow_reselect": True})
    first, second = entries("policy.changed")
    assert first.actor == ops and first.actor_repr == "ops"
    assert (first.target_type, first.target_id) == ("botadmin.team", str(team.pk))
    assert first.before == {"policy": {}} and first.after == {"policy": {"enabled": True}}
    assert second.before == {"policy": {"enabled": True}}
    assert second.after == {"policy": {"enabled": False, "allow_reselect": True}}
    assert second.created_at >= first.created_at


def test_invalid_layer_raises_and_writes_nothing(ops, team):
    services.set_policy_layer(ops, team, {"enabled": True})
    with pytest.raises(PolicyError) as info:
        services.set_policy_layer(
            ops, team, {"buttons": [{"key": "a", "label": "A", "semantic": "positive"}]}
        )
    assert info.value.errors == [("buttons", "must have 2 to 4 buttons, got 1")]
    assert Team.objects.get(pk=team.pk).policy == {"enabled": True}
    assert len(entries()) == 1


def test_unchanged_layer_writes_no_audit_entry(ops, team):
    services.set_policy_layer(ops, team, {"enabled": True})
    services.set_policy_layer(ops, team, {"enabled": True})
    assert len(entries("policy.changed")) == 1


def test_chat_policy_is_created_then_replaced_then_deleted_with_audit(ops, bot, chat):
    created = services.set_chat_policy(ops, bot, chat, {"enabled": True})
    services.set_chat_policy(ops, bot, chat, {"audience": "everyone"})
    assert ChatPolicy.objects.get(bot=bot, chat=chat).policy == {"audience": "everyone"}
    services.delete_chat_policy(ops, created)
    assert not ChatPolicy.objects.exists()
    actions = [(e.action, e.before, e.after) for e in entries()]
    assert actions == [
        ("policy.created", None, {"policy": {"enabled": True}}),
        ("policy.changed", {"policy": {"enabled": True}}, {"policy": {"audience": "everyone"}}),
        ("policy.deleted", {"policy": {"audience": "everyone"}}, None),
    ]


def test_system_actor_is_recorded_by_name(bot):
    services.set_policy_layer("seed_demo", bot, {"enabled": True})
    (entry,) = entries()
    assert entry.actor is None and entry.actor_repr == "seed_demo"


# --- plain fields, bindings, members ---------------------------------------------------------


def test_turning_api_only_on_is_audited(ops, bot):
    bot.api_only = True
    services.save_bot(ops, bot)
    (entry,) = entries("bot.changed")
    assert entry.before == {"api_only": False} and entry.after == {"api_only": True}
    assert Bot.objects.get(pk=bot.pk).api_only is True


def test_saving_unchanged_fields_writes_nothing(ops, bot):
    services.save_bot(ops, Bot.objects.get(pk=bot.pk))
    assert entries() == []


def test_binding_a_second_team_is_audited_and_makes_the_chat_ambiguous(ops, bot, chat, team):
    other = Team.objects.create(name="Other team", policy={"enabled": True})
    services.set_policy_layer(ops, team, {"enabled": True})
    services.bind_team_chat(ops, team, chat)
    assert services.effective_policy_for(bot, chat).enabled
    services.bind_team_chat(ops, other, chat)
    services.bind_team_chat(ops, other, chat)  # already bound: no-op
    assert services.effective_policy_for(bot, chat).reason == "ambiguous_team"
    bound = entries("chat.bound")
    assert [(e.before, e.after) for e in bound] == [
        ({"teams": []}, {"teams": ["Ops team"]}),
        ({"teams": ["Ops team"]}, {"teams": ["Ops team", "Other team"]}),
    ]
    assert services.unbind_team_chat(ops, other, chat) is True
    assert services.unbind_team_chat(ops, other, chat) is False
    assert services.effective_policy_for(bot, chat).enabled
    (unbound,) = entries("chat.unbound")
    assert unbound.after == {"teams": ["Ops team"]}


def test_team_members_are_added_and_removed_with_audit(ops, team, django_user_model):
    manager = django_user_model.objects.create_user("manager")
    services.add_team_member(ops, team, manager)
    services.add_team_member(ops, team, manager)
    assert list(team.members.all()) == [manager]
    assert services.remove_team_member(ops, team, manager) is True
    assert [e.action for e in entries()] == ["team.member_added", "team.member_removed"]


def test_deleting_a_team_is_audited_with_its_layer_and_chats(ops, team, chat):
    services.set_policy_layer(ops, team, {"enabled": True})
    TeamChat.objects.create(team=team, chat=chat)
    services.delete_team(ops, team)
    (entry,) = entries("team.deleted")
    assert entry.before["policy"] == {"enabled": True} and entry.before["chats"] == ["oc_svc"]
    assert not TeamChat.objects.exists()


# --- bot secrets ---------------------------------------------------------------------------


SECRET = "s3cr3t-Value-never-shown-0042"


def all_audit_text() -> str:
    return json.dumps([[e.before, e.after, e.target_repr] for e in AuditEntry.objects.all()])


def test_secret_is_written_to_a_0600_file_and_only_its_ref_is_stored(
    ops, bot, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        services.set_bot_secret(ops, bot, "app_secret", f"  {SECRET}\n")
    bot.refresh_from_db()
    path = secret_dir() / bot.app_secret_ref
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(secret_dir()).st_mode) == 0o700
    assert path.read_text() == SECRET
    assert bot.secret("app_secret") == SECRET and bot.has_credentials
    row = Bot.objects.filter(pk=bot.pk).values().get()
    assert SECRET not in json.dumps(row, default=str)
    (entry,) = entries("secret.set")
    assert entry.before == {"app_secret": "not set"} and entry.after == {"app_secret": "set"}
    assert SECRET not in all_audit_text()


def test_replacing_a_secret_removes_the_old_file_after_commit(
    ops, bot, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        services.set_bot_secret(ops, bot, "encrypt_key", "first-key")
    old_path = secret_dir() / bot.encrypt_key_ref
    with django_capture_on_commit_callbacks(execute=True):
        services.set_bot_secret(ops, bot, "encrypt_key", "second-key")
    assert not old_path.exists()
    assert Bot.objects.get(pk=bot.pk).secret("encrypt_key") == "second-key"
    second = entries("secret.set")[1]
    assert second.before == {"encrypt_key": "set"} and second.after == {"encrypt_key": "set"}


def test_clearing_a_secret_removes_ref_and_file(ops, bot, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.set_bot_secret(ops, bot, "verification_token", "tok")
    path = secret_dir() / bot.verification_token_ref
    with django_capture_on_commit_callbacks(execute=True):
        services.clear_bot_secret(ops, bot, "verification_token")
    assert Bot.objects.get(pk=bot.pk).verification_token_ref == ""
    assert not path.exists()
    (entry,) = entries("secret.cleared")
    assert entry.before == {"verification_token": "set"} and entry.after == {
        "verification_token": "not set"
    }


@pytest.mark.parametrize(
    ("name", "value"), [("app_secret", "   "), ("app_secret", ""), ("password", "x")]
)
def test_empty_secret_or_unknown_name_is_refused(ops, bot, name, value):
    with pytest.raises(ValueError):
        services.set_bot_secret(ops, bot, name, value)
    assert entries() == []


# --- API keys ------------------------------------------------------------------------------


def test_api_key_is_returned_once_and_stored_only_as_its_hash(ops, bot):
    raw, key = services.issue_api_key(ops, bot, "backend")
    assert raw.startswith(f"clk_{key.lookup}_")
    row = BotApiKey.objects.filter(pk=key.pk).values().get()
    assert row["token_hash"] == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in json.dumps(row, default=str)
    assert BotApiKey.find_active(raw) == key
    (entry,) = entries("apikey.issued")
    assert entry.after == {"bot": "cli_svc", "key": f"clk_{key.lookup}_…", "label": "backend"}
    assert raw not in all_audit_text()
    assert entry.actor == ops and key.created_by == ops


def test_revoked_key_stops_authenticating_and_is_audited_once(ops, bot):
    raw, key = services.issue_api_key(ops, bot)
    services.revoke_api_key(ops, key)
    services.revoke_api_key(ops, key)
    assert BotApiKey.find_active(raw) is None
    assert BotApiKey.objects.get(pk=key.pk).revoked_at is not None
    (entry,) = entries("apikey.revoked")
    assert entry.before["revoked_at"] is None and entry.after["revoked_at"]


def test_revoked_key_is_refused_by_the_api_authentication(ops, bot, rf):
    from rest_framework.exceptions import AuthenticationFailed
    from rest_framework.request import Request

    from botadmin.auth import BotApiKeyAuthentication

    raw, key = services.issue_api_key(ops, bot)
    request = Request(rf.get("/api/v1/x", HTTP_AUTHORIZATION=f"Bearer {raw}"))
    principal, auth = BotApiKeyAuthentication().authenticate(request)
    assert principal.bot == bot and auth == key
    services.revoke_api_key(ops, key)
    with pytest.raises(AuthenticationFailed):
        BotApiKeyAuthentication().authenticate(request)


# --- concurrency (PostgreSQL) --------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_layer_edits_leave_an_unbroken_audit_chain(make_bot):
    bot = make_bot(app_id="cli_race")
    layers = [{"negative_followup": {"comment": {"max_length": n}}} for n in range(100, 110)]
    barrier = threading.Barrier(len(layers))
    errors = []

    def edit(layer):
        try:
            barrier.wait()
            services.set_policy_layer(f"worker-{layer}", Bot.objects.get(pk=bot.pk), layer)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=edit, args=(layer,)) for layer in layers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    chain = list(AuditEntry.objects.filter(action="policy.changed").order_by("id"))
    assert len(chain) == len(layers)
    assert chain[0].before == {"policy": {}}
    for previous, current in zip(chain, chain[1:], strict=False):
        assert current.before == previous.after  # every edit saw the one before it
    assert Bot.objects.get(pk=bot.pk).policy == chain[-1].after["policy"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_first_chat_policy_saves_make_one_row(make_bot):
    bot = make_bot(app_id="cli_race2")
    chat = Chat.objects.create(chat_id="oc_race")
    barrier = threading.Barrier(6)
    errors = []

    def save(n):
        try:
            barrier.wait()
            services.set_chat_policy(
                "race", bot, chat, {"negative_followup": {"comment": {"max_length": n}}}
            )
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=save, args=(n,)) for n in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert ChatPolicy.objects.filter(bot=bot, chat=chat).count() == 1
    assert AuditEntry.objects.filter(action="policy.created").count() == 1
