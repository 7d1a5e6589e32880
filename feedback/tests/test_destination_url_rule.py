"""One registration rule for webhook destination URLs (`webhooks.check_registration_url`),
applied the same way by the admin form and by `destinations.save_destination`, with the
refusal reason shown in the reader's language while logs and attempt rows stay English."""

from __future__ import annotations

import pytest
from django.utils import translation

from feedback import destinations, webhooks
from feedback.models import WebhookAttempt, WebhookDestination
from plumbing.secretstore import write_secret

ADD = "/admin/feedback/webhookdestination/add/"

#: (url, English reason, Chinese reason): the same cases for both paths.
REFUSED = [
    (
        "https://receiver/hook",
        "This URL is refused: receiver is a single-label name (it would resolve through this "
        "server's own search domains); use a fully qualified name.",
        "此 URL 被拒绝：receiver 是单标签名称（会通过本服务器自己的搜索域解析）；请使用完整域名。",
    ),
    (
        "https://127.0.0.1/hook",
        "This URL is refused: 127.0.0.1 is a loopback address.",
        "此 URL 被拒绝：127.0.0.1 是环回地址。",
    ),
    (
        "https://10.0.0.5/hook",
        "This URL is refused: 10.0.0.5 is a private address.",
        "此 URL 被拒绝：10.0.0.5 是私有地址。",
    ),
    (
        "http://hooks.example.com/hook",
        "This URL is refused: the URL must use https.",
        "此 URL 被拒绝：URL 必须使用 https。",
    ),
]
ACCEPTED = ["https://hooks.example.com/hook", "https://receiver.example/hook"]


@pytest.fixture(autouse=True)
def _production_address_rules(settings):
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = False


def admin_form(url):
    return {
        "name": "Receiver",
        "url": url,
        "enabled": "on",
        "event_types": ["turn.completed"],
        "timeout_s": "10",
        "secret_action": "generate",
        "secret_value": "",
        "grace_hours": "24",
    }


def post_admin(admin_client, url, language):
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = language
    response = admin_client.post(ADD, admin_form(url))
    assert response.status_code == 200
    if WebhookDestination.objects.filter(url=url).exists():  # saved: the secret page
        return {}
    return response.context["adminform"].form.errors


def save(url):
    destination = WebhookDestination(name="Receiver", url=url, event_types=["turn.completed"])
    return destinations.save_destination(
        destination, actor=None, secret=destinations.SecretChange("generate")
    )


@pytest.mark.parametrize(("url", "english", "chinese"), REFUSED)
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_admin_form_refuses_with_the_reason_in_the_readers_language(
    admin_client, url, english, chinese, language
):
    errors = post_admin(admin_client, url, language)
    assert errors["url"] == [english if language == "en" else chinese]
    assert not WebhookDestination.objects.exists()


@pytest.mark.parametrize(("url", "english", "chinese"), REFUSED)
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_save_destination_refuses_the_same_urls_with_the_same_reasons(
    db, url, english, chinese, language
):
    with translation.override(language):
        with pytest.raises(destinations.InvalidDestination) as refused:
            save(url)
        assert refused.value.field == "url"
        assert str(refused.value.message) == (english if language == "en" else chinese)
    assert not WebhookDestination.objects.exists()


@pytest.mark.parametrize(("url", "english", "chinese"), REFUSED)
def test_the_reason_is_rendered_where_it_is_shown_not_where_it_is_raised(db, url, english, chinese):
    with translation.override("zh-hans"), pytest.raises(destinations.InvalidDestination) as refused:
        save(url)
    with translation.override("en"):
        assert str(refused.value.message) == english
    # the log form of the refusal is English whatever language was active when it was raised
    assert english.removeprefix("This URL is refused: ").removesuffix(".") == str(
        refused.value.refusal
    )


@pytest.mark.parametrize("url", ACCEPTED)
def test_both_paths_accept_fully_qualified_public_names(admin_client, url):
    assert post_admin(admin_client, url, "en") == {}
    WebhookDestination.objects.all().delete()
    save(url)
    assert WebhookDestination.objects.get().url == url


def test_the_test_flag_lifts_the_single_label_rule_on_both_paths(admin_client, settings):
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = True
    assert post_admin(admin_client, "https://receiver/hook", "en") == {}
    WebhookDestination.objects.all().delete()
    save("https://receiver/hook")
    assert WebhookDestination.objects.get().url == "https://receiver/hook"


def test_a_refused_test_event_is_shown_translated_and_logged_in_english(admin_client):
    destination = WebhookDestination.objects.create(
        name="stored before the rule",
        url="https://127.0.0.1/hook",
        event_types=["turn.completed"],
        secret_ref=write_secret(webhooks.generate_secret()),
    )
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    response = admin_client.post(
        "/admin/feedback/webhookdestination/",
        {"action": "send_test_event", "_selected_action": [destination.pk]},
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert len(shown) == 1 and "127.0.0.1 是环回地址" in shown[0], shown
    attempt = WebhookAttempt.objects.get()
    assert attempt.error == "blocked_destination: 127.0.0.1 is a loopback address"


MALFORMED = [
    "https://exa mple.com/hook",
    "https://..example.com/hook",
    "https://exa_mple.com/hook",
    "https://-hooks.example.com/hook",
    "https://hooks.example.com/a b",
    "https://hooks.example.com/\thook",
]


@pytest.mark.parametrize("url", MALFORMED)
@pytest.mark.parametrize("allow_private", [False, True])
def test_a_malformed_host_or_raw_whitespace_is_refused_on_both_paths(
    admin_client, settings, url, allow_private
):
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = allow_private
    errors = post_admin(admin_client, url, "en")
    assert errors["url"] == ["This URL is refused: not a valid URL."]
    with pytest.raises(destinations.InvalidDestination) as refused:
        save(url)
    assert refused.value.field == "url"
    assert not WebhookDestination.objects.exists()


def test_an_idn_host_in_either_form_is_accepted(db):
    for url in ("https://xn--bcher-kva.example/hook", "https://bücher.example/hook"):
        save(url)
        assert WebhookDestination.objects.get().url == url
        WebhookDestination.objects.all().delete()
