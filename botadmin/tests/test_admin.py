"""The admin as ops staff use it (Django test client, logged in as a superuser)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat

import pytest
from django.urls import reverse

from botadmin import services
from botadmin.models import AuditEntry, Bot, BotApiKey, Chat, ChatPolicy, Team, TeamChat
from botadmin.tests.conftest import admin_form_data
from plumbing.secretstore import secret_dir

SECRET = "Very-Secret-app-value-7731"


def change_url(obj):
    return reverse(f"admin:botadmin_{obj._meta.model_name}_change", args=[obj.pk])


def add_url(model):
    return reverse(f"admin:botadmin_{model._meta.model_name}_add")


def preview_source(html: str, path: str) -> str:
    """The source layer the preview shows for a field path."""
    m = re.search(rf'<tr data-path="{re.escape(path)}">.*?class="source source-(\w+)"', html, re.S)
    assert m, f"no preview row for {path}"
    return m.group(1)


@pytest.fixture
def bot(make_bot):
    return make_bot(app_id="cli_admin", name="Admin bot")


@pytest.fixture
def chat_policy(bot, db):
    chat = Chat.objects.create(chat_id="oc_admin", name="admin chat")
    team = Team.objects.create(name="Admin team", policy={"enabled": True})
    TeamChat.objects.create(team=team, chat=chat)
    return ChatPolicy.objects.create(bot=bot, chat=chat, policy={})


def get_form(staff, url):
    response = staff.get(url)
    assert response.status_code == 200
    return admin_form_data(response)


# --- invalid layers are refused next to the field, nothing saved -----------------------------


def _one_button(data):
    data.update(
        pl_buttons_override="on",
        pl_button_0_key="ok",
        pl_button_0_label="OK",
        pl_button_0_semantic="positive",
    )
    return "pl_buttons_override", "buttons: must have 2 to 4 buttons, got 1"


def _duplicate_key(data):
    data.update(pl_buttons_override="on")
    for i, semantic in enumerate(["positive", "progress", "negative"]):
        data.update(
            {
                f"pl_button_{i}_key": "same",
                f"pl_button_{i}_label": "L",
                f"pl_button_{i}_semantic": semantic,
            }
        )
    return "pl_button_1_key", "buttons[1].key: duplicate key same"


def _max_length_2001(data):
    data["pl_comment_max_length"] = "2001"
    return (
        "pl_comment_max_length",
        "negative_followup.comment.max_length: must be an integer from 1 to 2000",
    )


def _unknown_key(data):
    data["pl_json"] = json.dumps({"enabled": True, "colour": "red"})
    return "pl_json", "colour: unknown field"


def _reason_without_negative(data):
    data.update(
        pl_visible_override="on",
        pl_visible_semantics=["positive", "progress"],
        pl_buttons_override="on",
        pl_button_0_key="good",
        pl_button_0_label="Good",
        pl_button_0_semantic="positive",
        pl_button_1_key="going",
        pl_button_1_label="Going",
        pl_button_1_semantic="progress",
        pl_reasons_override="on",
        pl_reason_0_key="wrong",
        pl_reason_0_label="Wrong",
    )
    return (
        "pl_reasons_override",
        "negative_followup.reasons: reasons need the negative semantic to be visible",
    )


def _bad_button_key(data):
    data.update(pl_buttons_override="on")
    for i, (key, semantic) in enumerate(
        [("a", "positive"), ("b", "progress"), ("Bad Key", "negative")]
    ):
        data.update(
            {
                f"pl_button_{i}_key": key,
                f"pl_button_{i}_label": key,
                f"pl_button_{i}_semantic": semantic,
            }
        )
    return "pl_button_2_key", "buttons[2].key: must match [a-z0-9_-]+"


INVALID_EDITS = [
    _one_button,
    _duplicate_key,
    _max_length_2001,
    _unknown_key,
    _reason_without_negative,
    _bad_button_key,
]


@pytest.mark.parametrize("edit", INVALID_EDITS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("page", ["bot", "team", "chat_policy"])
def test_invalid_layer_is_refused_with_a_field_message_and_nothing_is_saved(
    staff, bot, chat_policy, edit, page
):
    obj = {"bot": bot, "team": Team.objects.get(name="Admin team"), "chat_policy": chat_policy}[
        page
    ]
    before = type(obj).objects.get(pk=obj.pk).policy
    data = get_form(staff, change_url(obj))
    data["name"] = data.get("name", "") and data["name"] + " renamed"
    field, message = edit(data)
    response = staff.post(change_url(obj), data)
    assert response.status_code == 200  # the form again, not a redirect
    form = response.context["adminform"].form
    assert message in form.errors[field]
    assert message in response.content.decode()
    saved = type(obj).objects.get(pk=obj.pk)
    assert saved.policy == before
    assert not getattr(saved, "name", "").endswith("renamed")
    assert AuditEntry.objects.count() == 0


def test_editing_both_the_fields_and_the_json_is_refused(staff, bot):
    data = get_form(staff, change_url(bot))
    data["pl_enabled"] = "on"
    data["pl_json"] = json.dumps({"allow_reselect": True})
    response = staff.post(change_url(bot), data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["pl_json"]
    assert Bot.objects.get(pk=bot.pk).policy == {}


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        # json.loads raises a plain ValueError (not JSONDecodeError) past 4300 digits
        '{"negative_followup": {"comment": {"max_length": ' + "9" * 5000 + "}}}",
        # escapes JSON allows but UTF-8 (the page) and PostgreSQL (jsonb) cannot hold
        '{"\\ud800": 1}',
        '{"buttons": [{"key": "a", "semantic": "positive", "label": "\\udc00"}]}',
        '{"allow_reselect": true, "x": "\\u0000"}',
    ],
    ids=["syntax", "huge-number", "surrogate-key", "surrogate-label", "nul"],
)
def test_unparseable_json_is_a_field_error(staff, bot, text):
    data = get_form(staff, change_url(bot))
    data["pl_json"] = text
    response = staff.post(change_url(bot), data)
    assert response.status_code == 200
    assert "pl_json" in response.context["adminform"].form.errors


# --- valid edits save, audit and show in the preview ------------------------------------------


def test_valid_structured_edit_saves_partial_audits_and_preview_shows_the_chat_source(
    staff, chat_policy
):
    url = change_url(chat_policy)
    page = staff.get(url).content.decode()
    assert preview_source(page, "allow_reselect") == "default"
    assert preview_source(page, "enabled") == "team"
    data = admin_form_data(staff.get(url))
    data["pl_allow_reselect"] = "on"
    data["pl_comment_required"] = "on"
    response = staff.post(url, data)
    assert response.status_code == 302, (
        response.context and response.context["adminform"].form.errors
    )
    saved = ChatPolicy.objects.get(pk=chat_policy.pk)
    assert saved.policy == {
        "allow_reselect": True,
        "negative_followup": {"comment": {"required": True}},
    }
    (entry,) = AuditEntry.objects.filter(action="policy.changed")
    assert entry.actor_repr == "admin" and entry.before == {"policy": {}}
    assert entry.after == {"policy": saved.policy}
    page = staff.get(url).content.decode()
    assert preview_source(page, "allow_reselect") == "chat"
    assert preview_source(page, "negative_followup.comment.required") == "chat"
    assert preview_source(page, "negative_followup.comment.enabled") == "default"
    assert 'data-reason="enabled"' in page


def test_valid_json_edit_on_the_bot_page_saves_and_preview_shows_the_bot_source(staff, bot):
    url = change_url(bot)
    data = get_form(staff, url)
    layer = {
        "enabled": True,
        "visible_semantics": ["positive", "negative"],
        "buttons": [
            {"key": "yes", "label": "可用", "semantic": "positive"},
            {"key": "no", "label": "有误", "semantic": "negative", "style": "danger"},
        ],
    }
    data["pl_json"] = json.dumps(layer, ensure_ascii=False)
    assert staff.post(url, data).status_code == 302
    assert Bot.objects.get(pk=bot.pk).policy == layer
    page = staff.get(url).content.decode()
    assert preview_source(page, "buttons") == "bot" and preview_source(page, "enabled") == "bot"
    assert "Feedback is on." in page


def test_unchanged_save_keeps_the_stored_layer_exactly(staff, bot):
    Bot.objects.filter(pk=bot.pk).update(
        policy={"audience": "everyone", "reviewers": [], "negative_followup": {}}
    )
    data = get_form(staff, change_url(bot))
    assert staff.post(change_url(bot), data).status_code == 302
    assert Bot.objects.get(pk=bot.pk).policy == {
        "audience": "everyone",
        "reviewers": [],
        "negative_followup": {},
    }
    # the structured fields cannot express the empty parts; an untouched save keeps them
    assert not AuditEntry.objects.exists()


def test_structured_form_shows_the_stored_layer(staff, bot):
    Bot.objects.filter(pk=bot.pk).update(
        policy={
            "enabled": False,
            "audience": "reviewers",
            "reviewers": ["ou_a", "ou_b"],
            "negative_followup": {"comment": {"max_length": 300}},
        }
    )
    form = staff.get(change_url(bot)).context["adminform"].form
    assert form["pl_enabled"].value() == "off"
    assert form["pl_audience"].value() == "reviewers"
    assert form["pl_reviewers"].value() == "ou_a\nou_b"
    assert form["pl_comment_max_length"].value() == 300
    assert form["pl_buttons_override"].value() is False


def test_reviewers_edit_through_the_structured_form(staff, bot):
    data = get_form(staff, change_url(bot))
    data.update(pl_audience="reviewers", pl_reviewers="ou_a, ou_b\nou_c")
    assert staff.post(change_url(bot), data).status_code == 302
    assert Bot.objects.get(pk=bot.pk).policy == {
        "audience": "reviewers",
        "reviewers": ["ou_a", "ou_b", "ou_c"],
    }


def test_preview_says_why_feedback_is_off(staff, bot, chat_policy):
    page = staff.get(change_url(bot)).content.decode()
    assert "no layer turns it on" in page and 'data-reason="disabled"' in page
    other = Team.objects.create(name="Second team")
    TeamChat.objects.create(team=other, chat=chat_policy.chat)
    page = staff.get(change_url(chat_policy)).content.decode()
    assert 'data-reason="ambiguous_team"' in page and "Second team" in page
    Bot.objects.filter(pk=bot.pk).update(api_only=True)
    page = staff.get(change_url(chat_policy)).content.decode()
    assert 'data-reason="api_only"' in page and "API-only" in page


def test_new_chat_policy_is_created_through_the_add_page(staff, bot, db):
    chat = Chat.objects.create(chat_id="oc_new")
    data = get_form(staff, add_url(ChatPolicy))
    data.update(bot=str(bot.pk), chat=str(chat.pk), pl_enabled="on")
    response = staff.post(add_url(ChatPolicy), data)
    assert response.status_code == 302
    cp = ChatPolicy.objects.get(bot=bot, chat=chat)
    assert cp.policy == {"enabled": True}
    assert AuditEntry.objects.filter(action="policy.created", target_id=str(cp.pk)).exists()


def test_second_chat_policy_for_the_same_pair_is_refused(staff, chat_policy):
    data = get_form(staff, add_url(ChatPolicy))
    data.update(bot=str(chat_policy.bot_id), chat=str(chat_policy.chat_id))
    response = staff.post(add_url(ChatPolicy), data)
    assert response.status_code == 200
    assert ChatPolicy.objects.count() == 1


def test_new_team_with_a_layer_and_a_bound_chat(staff, db):
    chat = Chat.objects.create(chat_id="oc_bind")
    data = get_form(staff, add_url(Team))
    data.update(
        {
            "name": "New team",
            "pl_enabled": "on",
            "chat_bindings-TOTAL_FORMS": "1",
            "chat_bindings-0-chat": str(chat.pk),
        }
    )
    response = staff.post(add_url(Team), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    team = Team.objects.get(name="New team")
    assert team.policy == {"enabled": True}
    assert list(team.chats.all()) == [chat]
    assert [e.action for e in AuditEntry.objects.order_by("id")] == [
        "team.created",
        "policy.changed",
        "chat.bound",
    ]


def test_unbinding_a_chat_inline_goes_through_the_service(staff, chat_policy):
    team = Team.objects.get(name="Admin team")
    data = get_form(staff, change_url(team))
    data["chat_bindings-0-DELETE"] = "on"
    assert staff.post(change_url(team), data).status_code == 302
    assert not TeamChat.objects.exists()
    assert AuditEntry.objects.filter(action="chat.unbound").count() == 1


# --- write-only secrets ---------------------------------------------------------------------


def test_bot_secret_is_write_only_and_never_rendered(
    staff, bot, django_capture_on_commit_callbacks
):
    data = get_form(staff, change_url(bot))
    assert data["app_secret"] == ""
    data["app_secret"] = SECRET
    with django_capture_on_commit_callbacks(execute=True):
        assert staff.post(change_url(bot), data).status_code == 302
    bot.refresh_from_db()
    assert bot.secret("app_secret") == SECRET
    assert stat.S_IMODE(os.stat(secret_dir() / bot.app_secret_ref).st_mode) == 0o600
    entry = AuditEntry.objects.get(action="secret.set")
    pages = [
        change_url(bot),
        reverse("admin:botadmin_bot_changelist"),
        reverse("admin:botadmin_auditentry_changelist"),
        change_url(entry),
        reverse("admin:index"),
    ]
    for url in pages:
        html = staff.get(url).content.decode()
        assert SECRET not in html, url
    html = staff.get(change_url(bot)).content.decode()
    assert "Currently: set." in html
    assert staff.get(change_url(bot)).context["adminform"].form["app_secret"].value() in (None, "")


def test_bot_secret_can_be_cleared(staff, make_bot, django_capture_on_commit_callbacks):
    bot = make_bot(app_id="cli_clear", app_secret=SECRET)
    path = secret_dir() / bot.app_secret_ref
    data = get_form(staff, change_url(bot))
    data["clear_app_secret"] = "on"
    with django_capture_on_commit_callbacks(execute=True):
        assert staff.post(change_url(bot), data).status_code == 302
    assert Bot.objects.get(pk=bot.pk).app_secret_ref == ""
    assert not path.exists()
    assert AuditEntry.objects.get(action="secret.cleared").after == {"app_secret": "not set"}


def test_new_value_and_clear_together_are_refused(staff, bot):
    data = get_form(staff, change_url(bot))
    data.update(encrypt_key="k", clear_encrypt_key="on")
    response = staff.post(change_url(bot), data)
    assert response.status_code == 200
    assert "clear_encrypt_key" in response.context["adminform"].form.errors
    assert Bot.objects.get(pk=bot.pk).encrypt_key_ref == ""


# --- API keys -------------------------------------------------------------------------------


def test_api_key_is_issued_from_the_bot_page_link_and_shown_once(staff, bot):
    bot_page = staff.get(change_url(bot)).content.decode()
    link = f"{add_url(BotApiKey)}?bot={bot.pk}"
    assert link in bot_page
    data = get_form(staff, link)
    assert data["bot"] == str(bot.pk)
    data["label"] = "prod backend"
    response = staff.post(add_url(BotApiKey), data)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    raw = re.search(r'value="(clk_[0-9a-f]{8}_[A-Za-z0-9_-]+)"', response.content.decode()).group(1)
    key = BotApiKey.objects.get()
    assert key.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in json.dumps(BotApiKey.objects.values().get(), default=str)
    assert BotApiKey.find_active(raw) == key
    for url in [
        change_url(key),
        reverse("admin:botadmin_botapikey_changelist"),
        change_url(bot),
        reverse("admin:botadmin_auditentry_changelist"),
    ]:
        assert raw not in staff.get(url).content.decode(), url
    assert AuditEntry.objects.get(action="apikey.issued").after["label"] == "prod backend"


def test_api_key_is_revoked_from_its_page(staff, bot):
    raw, key = services.issue_api_key(None, bot)
    data = get_form(staff, change_url(key))
    data["_revoke"] = "Revoke"
    assert staff.post(change_url(key), data).status_code == 302
    assert BotApiKey.find_active(raw) is None
    assert AuditEntry.objects.filter(action="apikey.revoked", actor_repr="admin").count() == 1


def test_api_keys_are_revoked_with_the_list_action(staff, bot):
    keys = [services.issue_api_key(None, bot)[1] for _ in range(2)]
    response = staff.post(
        reverse("admin:botadmin_botapikey_changelist"),
        {"action": "revoke_selected", "_selected_action": [k.pk for k in keys]},
    )
    assert response.status_code == 302
    assert BotApiKey.objects.active().count() == 0
    assert AuditEntry.objects.filter(action="apikey.revoked").count() == 2


@pytest.mark.parametrize(
    ("language", "names"),
    [
        ("en", ["Revoke selected bot API keys", "Revoke selected desktop tokens"]),
        ("zh-hans", ["吊销所选机器人 API 密钥", "吊销所选桌面令牌"]),
    ],
)
def test_revoke_action_is_named_after_each_token_kind_in_both_languages(
    staff, bot, language, names
):
    services.issue_api_key(None, bot)
    services.issue_desktop_token(None, bot, "ou_panel_user", "laptop")
    pages = [
        staff.get(reverse(f"admin:botadmin_{model}_changelist"), HTTP_ACCEPT_LANGUAGE=language)
        for model in ("botapikey", "desktoptoken")
    ]
    for page, name in zip(pages, names, strict=True):
        assert name in page.content.decode()


def test_api_keys_cannot_be_deleted(staff, bot):
    _raw, key = services.issue_api_key(None, bot)
    assert staff.get(reverse("admin:botadmin_botapikey_delete", args=[key.pk])).status_code == 403


# --- audit log, lists, language -------------------------------------------------------------


def test_audit_log_is_read_only_and_filterable(staff, bot):
    services.set_policy_layer(None, bot, {"enabled": True})
    services.issue_api_key(None, bot)
    assert staff.get(add_url(AuditEntry)).status_code == 403
    entry = AuditEntry.objects.get(action="policy.changed")
    assert staff.post(change_url(entry), {}).status_code == 403
    page = staff.get(reverse("admin:botadmin_auditentry_changelist") + "?action=policy.changed")
    assert list(page.context["cl"].result_list) == [entry]


@pytest.mark.parametrize(
    ("model", "query"),
    [
        (Team, "?q=Admin"),
        (Bot, "?q=cli_admin&api_only__exact=0&credentials=no"),
        (Chat, "?q=oc_&bound=one"),
        (ChatPolicy, "?q=oc_admin"),
        (BotApiKey, "?status=active"),
        (AuditEntry, "?q=admin"),
    ],
)
def test_every_list_renders_with_search_and_filters(staff, chat_policy, model, query):
    services.issue_api_key(None, chat_policy.bot)
    response = staff.get(reverse(f"admin:botadmin_{model._meta.model_name}_changelist") + query)
    assert response.status_code == 200
    if model is not AuditEntry:
        assert response.context["cl"].result_count >= 1


def test_webhook_destinations_are_administered_by_the_feedback_app(staff):
    from django.contrib import admin

    from feedback.models import WebhookDestination

    assert type(admin.site._registry[WebhookDestination]).__module__ == "feedback.admin"


def test_admin_speaks_chinese_by_default(admin_client, bot):
    page = admin_client.get(change_url(bot)).content.decode()
    assert "有效策略预览" in page
    assert "继承" in page


def test_new_bot_with_credentials_and_a_layer_is_created_through_the_add_page(staff, db):
    data = get_form(staff, add_url(Bot))
    data.update(name="Fresh", app_id="cli_fresh", domain="lark", app_secret=SECRET, pl_enabled="on")
    response = staff.post(add_url(Bot), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    bot = Bot.objects.get(app_id="cli_fresh")
    assert bot.secret("app_secret") == SECRET and bot.policy == {"enabled": True}
    assert [e.action for e in AuditEntry.objects.order_by("id")] == [
        "bot.created",
        "secret.set",
        "policy.changed",
    ]
    assert SECRET not in staff.get(change_url(bot)).content.decode()


@pytest.mark.parametrize("app_id", ["cli bad id", "cli/../x", "cli_ü", "cli_x;y"])
def test_an_app_id_that_cannot_be_in_the_callback_url_is_a_field_error(staff, db, app_id):
    data = get_form(staff, add_url(Bot))
    data.update(name="Bad", app_id=app_id, domain="feishu")
    response = staff.post(add_url(Bot), data)
    assert response.status_code == 200
    assert "app_id" in response.context["adminform"].form.errors
    assert not Bot.objects.filter(name="Bad").exists()


def test_list_columns_say_whether_feedback_is_on(staff, chat_policy):
    page = staff.get(reverse("admin:botadmin_chatpolicy_changelist")).content.decode()
    assert '<td class="field-effective_feedback">on</td>' in page
    page = staff.get(reverse("admin:botadmin_bot_changelist")).content.decode()
    assert "off: disabled" in page


def test_browser_line_endings_in_reviewers_do_not_block_a_json_edit(staff, bot):
    Bot.objects.filter(pk=bot.pk).update(
        policy={"audience": "reviewers", "reviewers": ["ou_a", "ou_b"]}
    )
    data = get_form(staff, change_url(bot))
    data["pl_reviewers"] = data["pl_reviewers"].replace("\n", "\r\n")  # as a browser posts it
    data["pl_json"] = json.dumps(
        {"audience": "reviewers", "reviewers": ["ou_a", "ou_b"], "enabled": True}
    )
    response = staff.post(change_url(bot), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Bot.objects.get(pk=bot.pk).policy["enabled"] is True


@pytest.mark.parametrize(
    ("model", "view_perm"),
    [("botapikey", "view_botapikey"), ("desktoptoken", "view_desktoptoken")],
)
def test_staff_who_may_only_view_tokens_cannot_revoke_them_with_the_list_action(
    client, bot, model, view_perm
):
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename=view_perm))
    client.force_login(viewer)
    if model == "botapikey":
        raw, token = services.issue_api_key(None, bot)
    else:
        raw, token = services.issue_desktop_token(None, bot, "ou_someone")
    url = reverse(f"admin:botadmin_{model}_changelist")
    page = client.get(url, HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 200 and "revoke_selected" not in page.content.decode()
    client.post(url, {"action": "revoke_selected", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is None
    assert not AuditEntry.objects.filter(action__endswith=".revoked").exists()


# --- English forms, agent options, card language ---------------------------------------------


def test_structured_form_saves_english_labels_agent_options_and_the_preview_shows_them(staff, bot):
    url = change_url(bot)
    data = get_form(staff, url)
    data.update(
        pl_buttons_override="on",
        pl_button_0_key="yes",
        pl_button_0_label="可用",
        pl_button_0_label_en="Usable",
        pl_button_0_semantic="positive",
        pl_button_1_key="meh",
        pl_button_1_label="一般",
        pl_button_1_semantic="progress",
        pl_button_2_key="no",
        pl_button_2_label="有误",
        pl_button_2_label_en="Wrong",
        pl_button_2_semantic="negative",
        pl_reasons_override="on",
        pl_reason_0_key="stale",
        pl_reason_0_label="过时",
        pl_reason_0_label_en="Out of date",
        pl_comment_placeholder_en="Tell us more",
        pl_agent_options="buttons_and_reasons",
        card_language="en",
    )
    response = staff.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    saved = Bot.objects.get(pk=bot.pk)
    assert saved.card_language == "en"
    assert saved.policy == {
        "buttons": [
            {"key": "yes", "label": "可用", "label_en": "Usable", "semantic": "positive"},
            {"key": "meh", "label": "一般", "semantic": "progress"},
            {"key": "no", "label": "有误", "label_en": "Wrong", "semantic": "negative"},
        ],
        "negative_followup": {
            "reasons": [{"key": "stale", "label": "过时", "label_en": "Out of date"}],
            "comment": {"placeholder_en": "Tell us more"},
        },
        "agent_options": "buttons_and_reasons",
    }
    page = staff.get(url).content.decode()
    assert preview_source(page, "agent_options") == "bot"
    assert preview_source(page, "negative_followup.comment.placeholder_en") == "bot"
    assert '<span lang="en">Usable</span>' in page and '<span lang="en">Out of date</span>' in page
    assert "feedback_options in POST /api/v1/deliveries" in page and "plan_ok" in page
    form = staff.get(url).context["adminform"].form
    assert form["pl_button_2_label_en"].value() == "Wrong"
    assert form["pl_agent_options"].value() == "buttons_and_reasons"


def test_a_too_long_english_label_is_refused_next_to_its_field(staff, bot):
    url = change_url(bot)
    data = get_form(staff, url)
    data.update(
        pl_buttons_override="on",
        pl_button_0_key="yes",
        pl_button_0_label="可用",
        pl_button_0_label_en="x" * 25,
        pl_button_0_semantic="positive",
        pl_button_1_key="meh",
        pl_button_1_label="一般",
        pl_button_1_semantic="progress",
        pl_button_2_key="no",
        pl_button_2_label="有误",
        pl_button_2_semantic="negative",
    )
    response = staff.post(url, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["pl_button_0_label_en"]
    assert Bot.objects.get(pk=bot.pk).policy == {}
