"""Admin of webhook destinations (form validation, write-only secret shown once, rotation,
assignment, audit), the test-event action, the attempt log and the outbox list."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from botadmin.models import AuditEntry, Team
from feedback import webhooks
from feedback.models import Event, OutboxItem, WebhookAttempt, WebhookDestination
from feedback.tests.receiver import Reply
from plumbing.secretstore import read_secret

ADD = "/admin/feedback/webhookdestination/add/"
LIST = "/admin/feedback/webhookdestination/"
OUTBOX = "/admin/feedback/outboxitem/"
ATTEMPTS = "/admin/feedback/webhookattempt/"


def change_url(destination):
    return f"/admin/feedback/webhookdestination/{destination.pk}/change/"


def form(**overrides):
    data = {
        "name": "Receiver",
        "url": "https://hooks.example.com/cardloop",
        "enabled": "on",
        "event_types": ["turn.completed", "feedback.revised"],
        "timeout_s": "10",
        "secret_action": "generate",
        "secret_value": "",
        "grace_hours": "24",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


@pytest.fixture(autouse=True)
def _production_address_rules(settings):
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = False


@pytest.fixture
def en_client(admin_client):
    """The admin in English (the default language is zh-hans), for asserting messages."""
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return admin_client


def test_a_generated_secret_is_shown_once_and_never_rendered_again(admin_client):
    response = admin_client.post(ADD, form())
    assert response.status_code == 200
    destination = WebhookDestination.objects.get()
    secret = read_secret(destination.secret_ref)
    assert secret.startswith("whsec_")
    page = response.content.decode()
    assert secret in page
    assert "no-store" in response["Cache-Control"]
    for url in (change_url(destination), LIST, "/admin/botadmin/auditentry/"):
        assert secret not in admin_client.get(url).content.decode()
    assert secret[6:] not in json.dumps(list(AuditEntry.objects.values("before", "after")))
    created = AuditEntry.objects.get(action="webhook_destination.created")
    assert created.after["secret"] == "set"
    assert created.after["event_types"] == ["turn.completed", "feedback.revised"]
    assert created.after["include_comment"] is False
    assert destination.timeout_ms == 10_000


def test_a_pasted_secret_is_stored_and_not_shown(admin_client):
    secret = webhooks.generate_secret()
    response = admin_client.post(ADD, form(secret_action="set", secret_value=secret))
    assert response.status_code == 302
    destination = WebhookDestination.objects.get()
    assert read_secret(destination.secret_ref) == secret
    assert secret not in admin_client.get(change_url(destination)).content.decode()


def test_the_add_form_defaults(admin_client):
    response = admin_client.get(ADD)
    form_ = response.context["adminform"].form
    assert form_["timeout_s"].value() == 10
    assert form_["include_comment"].value() in (False, None)
    assert form_["secret_action"].value() == "generate"
    assert "webhook.test" not in dict(form_.fields["event_types"].choices)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"url": "http://hooks.example.com/"}, "url"),
        ({"url": "https://user:pw@hooks.example.com/"}, "url"),
        ({"url": "https://hooks.example.com/#frag"}, "url"),
        ({"url": "https://127.0.0.1/"}, "url"),
        ({"url": "https://10.0.0.5/hook"}, "url"),
        ({"url": "https://2130706433/"}, "url"),
        ({"url": "https://0x7f.1/"}, "url"),
        ({"url": "https://[::ffff:127.0.0.1]/"}, "url"),
        ({"url": "https://localhost/"}, "url"),
        ({"timeout_s": "0.05"}, "timeout_s"),
        ({"timeout_s": "31"}, "timeout_s"),
        ({"event_types": []}, "event_types"),
        ({"event_types": ["webhook.test"]}, "event_types"),
        ({"secret_action": "set", "secret_value": ""}, "secret_value"),
        ({"secret_action": "set", "secret_value": "hunter2"}, "secret_value"),
        ({"secret_action": "keep"}, "secret_action"),
    ],
)
def test_the_destination_form_refuses_bad_values(admin_client, overrides, field):
    response = admin_client.post(ADD, form(**overrides))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert not WebhookDestination.objects.exists()


def test_timeouts_at_the_limits_are_accepted(admin_client):
    assert admin_client.post(ADD, form(name="a", timeout_s="0.1")).status_code == 200
    assert admin_client.post(ADD, form(name="b", timeout_s="30")).status_code == 200
    assert sorted(WebhookDestination.objects.values_list("timeout_ms", flat=True)) == [100, 30_000]


def test_assignment_and_flags_are_saved_and_audited(admin_client, make_bot):
    team = Team.objects.create(name="Support")
    bot = make_bot()
    admin_client.post(
        ADD, form(include_comment="on", teams=[team.pk], bots=[bot.pk], timeout_s="2.5")
    )
    destination = WebhookDestination.objects.get()
    assert destination.include_comment is True
    assert destination.timeout_ms == 2500
    assert list(destination.teams.all()) == [team]
    assert list(destination.bots.all()) == [bot]
    after = AuditEntry.objects.get(action="webhook_destination.created").after
    assert (after["teams"], after["bots"]) == ([team.pk], [bot.pk])

    response = admin_client.post(
        change_url(destination),
        form(secret_action="keep", teams=[], bots=[bot.pk], enabled=None),
    )
    assert response.status_code == 302
    destination.refresh_from_db()
    assert destination.enabled is False
    assert list(destination.teams.all()) == []
    changed = AuditEntry.objects.get(action="webhook_destination.changed")
    assert changed.before["enabled"] is True and changed.after["enabled"] is False
    assert changed.before["teams"] == [team.pk] and changed.after["teams"] == []


def test_rotating_keeps_the_old_secret_signing_for_the_grace_period(admin_client):
    admin_client.post(ADD, form())
    destination = WebhookDestination.objects.get()
    old_ref = destination.secret_ref
    response = admin_client.post(
        change_url(destination), form(secret_action="generate", grace_hours="24")
    )
    assert response.status_code == 200
    destination.refresh_from_db()
    new_secret = read_secret(destination.secret_ref)
    assert new_secret in response.content.decode()
    assert destination.previous_secret_ref == old_ref
    expected = timezone.now() + timedelta(hours=24)
    assert abs((destination.previous_secret_expires_at - expected).total_seconds()) < 60
    rotated = AuditEntry.objects.get(action="webhook_destination.secret_rotated")
    assert rotated.after["previous_secret"] == "set"
    page = admin_client.get(change_url(destination)).content.decode()
    assert new_secret not in page
    assert read_secret(old_ref) not in page


def test_replacing_with_no_grace_drops_the_old_secret(
    admin_client, django_capture_on_commit_callbacks
):
    admin_client.post(ADD, form())
    destination = WebhookDestination.objects.get()
    old_ref = destination.secret_ref
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(change_url(destination), form(secret_action="generate", grace_hours="0"))
    destination.refresh_from_db()
    assert destination.previous_secret_ref == ""
    assert read_secret(old_ref) is None
    assert AuditEntry.objects.filter(action="webhook_destination.secret_generated").exists()


def test_deleting_a_destination_is_audited_and_removes_its_secret(
    admin_client, django_capture_on_commit_callbacks
):
    admin_client.post(ADD, form())
    destination = WebhookDestination.objects.get()
    ref = destination.secret_ref
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            f"/admin/feedback/webhookdestination/{destination.pk}/delete/", {"post": "yes"}
        )
    assert response.status_code == 302
    assert not WebhookDestination.objects.exists()
    assert read_secret(ref) is None
    assert AuditEntry.objects.filter(action="webhook_destination.deleted").exists()


# ---------------------------------------------------------------------------------------------
# Test event, attempt log, outbox list
# ---------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_the_test_event_action_delivers_a_signed_event_and_logs_the_attempt(
    en_client, receiver, make_destination
):
    destination, secret = make_destination(receiver.url(), event_types=["turn.completed"])
    response = en_client.post(
        LIST, {"action": "send_test_event", "_selected_action": [destination.pk]}, follow=True
    )
    messages = [str(m) for m in response.context["messages"]]
    assert any("delivered" in m and "HTTP 200" in m for m in messages), messages
    request = receiver.requests[0]
    payload = Webhook(secret).verify(request.body, request.headers)
    assert payload["type"] == "webhook.test"
    assert request.headers["webhook-event-type"] == "webhook.test"
    attempt = WebhookAttempt.objects.get(destination=destination)
    assert (attempt.status_code, attempt.outcome) == (200, "delivered")
    assert AuditEntry.objects.filter(action="webhook_destination.test_sent").exists()

    log = en_client.get(ATTEMPTS, {"destination__id__exact": destination.pk})
    assert log.context["cl"].result_count == 1
    detail = en_client.get(f"{ATTEMPTS}{attempt.pk}/change/").content.decode()
    assert "{&quot;ok&quot;:true}" in detail or '{"ok":true}' in detail


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_a_failing_test_event_reports_the_error_and_is_not_retried(
    en_client, receiver, make_destination
):
    destination, _ = make_destination(receiver.url())
    receiver.reply(Reply(503, body=b"maintenance"))
    response = en_client.post(
        LIST, {"action": "send_test_event", "_selected_action": [destination.pk]}, follow=True
    )
    messages = [str(m) for m in response.context["messages"]]
    assert any("failed" in m and "HTTP 503" in m for m in messages), messages
    item = OutboxItem.objects.get(destination=destination)
    assert item.status in ("failed", "dead")
    attempt = WebhookAttempt.objects.get(outbox_item=item)
    assert (attempt.outcome, attempt.response_excerpt) == ("retryable_status", "maintenance")


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_attempt_log_filters(admin_client, receiver, make_destination, emit_event, make_worker):
    first, _ = make_destination(receiver.url(), name="first")
    second, _ = make_destination(receiver.url("/other"), name="second")
    receiver.reply(Reply(500))
    emit_event()
    make_worker(concurrency=1).run_until_idle()
    assert WebhookAttempt.objects.count() == 2

    def count(**params):
        response = admin_client.get(ATTEMPTS, params)
        assert response.status_code == 200
        return response.context["cl"].result_count

    assert count() == 2
    assert count(destination__id__exact=first.pk) == 1
    assert count(outcome="retryable_status") == 1
    assert count(outcome="delivered") == 1
    assert count(status_code=500) == 1


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_outbox_list_filters_and_requeue_action(
    en_client, receiver, make_destination, emit_event, make_worker, clock
):
    good, _ = make_destination(receiver.url(), name="good", event_types=["interaction.resolved"])
    bad, _ = make_destination(receiver.url("/bad"), name="bad")
    receiver.handler = lambda r: Reply(500) if r.path == "/bad" else None
    emit_event("interaction.resolved")
    emit_event("turn.completed")
    worker = make_worker(max_attempts=1)
    worker.run_until_idle()

    def count(**params):
        response = en_client.get(OUTBOX, params)
        assert response.status_code == 200
        return response.context["cl"].result_count

    assert count() == 3
    assert count(status__exact="dead") == 2
    assert count(status__exact="done") == 1
    assert count(destination__id__exact=good.pk) == 1
    assert count(event__type__exact="turn.completed") == 1
    assert "next_attempt_at" in en_client.get(OUTBOX).context["cl"].list_display
    assert "attempts" in en_client.get(OUTBOX).context["cl"].list_display

    all_rows = list(OutboxItem.objects.values_list("pk", flat=True))
    response = en_client.post(
        OUTBOX, {"action": "requeue", "_selected_action": all_rows}, follow=True
    )
    assert any("2 row(s) re-queued" in str(m) for m in response.context["messages"])
    assert sorted(OutboxItem.objects.values_list("status", flat=True)) == [
        "done",
        "pending",
        "pending",
    ]
    assert AuditEntry.objects.get(action="outbox.requeued").target_id == str(bad.pk)
    receiver.handler = None
    make_worker().run_until_idle()
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"done"}


def test_outbox_pages_never_show_comment_text(
    admin_client, make_bot, make_delivery, make_destination
):
    from django.db import transaction

    from feedback.events import emit_feedback_revised
    from feedback.models import Revision

    opted, _ = make_destination("https://opted.example.com/", include_comment=True)
    delivery = make_delivery(make_bot(), webhook_destination_ids=[opted.pk])
    revision = Revision.objects.create(
        revision_id="rev_1",
        delivery=delivery,
        operator_open_id="ou_1",
        revision=1,
        verdict_key="wrong",
        semantic="negative",
        comment="secret-comment-text",
        callback_key="cb",
    )
    with transaction.atomic():
        event, _ = emit_feedback_revised(revision)
    item = OutboxItem.objects.get()
    assert "secret-comment-text" in item.body  # only the opted-in row carries it
    for url in (OUTBOX, f"{OUTBOX}{item.pk}/change/", f"/admin/feedback/event/{event.pk}/change/"):
        response = admin_client.get(url)
        assert response.status_code == 200
        assert "secret-comment-text" not in response.content.decode()


def test_read_only_lists_cannot_be_edited(admin_client, make_destination, emit_event):
    make_destination("https://a.example.com/")
    emit_event()
    item = OutboxItem.objects.get()
    assert admin_client.get(f"{OUTBOX}add/").status_code == 403
    assert admin_client.post(f"{OUTBOX}{item.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Event.objects.count() == 1


def test_the_admin_speaks_chinese_by_default(admin_client):
    page = admin_client.get(ADD).content.decode()
    assert "签名密钥" in page
    assert "生成密钥（仅显示一次）" in page
