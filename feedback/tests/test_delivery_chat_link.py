"""A delivery sent to a chat Cardloop has no `Chat` row for is linked to that chat once the row
appears (`botadmin.services.save_chat`, which the admin and `seed_demo` use), in the
transaction that saves the chat, so analytics and the admin see the delivery under its chat.
Real lark-oapi client against the loopback stub."""

from __future__ import annotations

import pytest

from botadmin import services
from botadmin.models import Chat
from feedback.models import Delivery

pytestmark = pytest.mark.django_db(transaction=True)


def _delivered(feedback_api, chat_id: str) -> Delivery:
    response = feedback_api.deliver(chat_id=chat_id)
    assert response.status_code == 201, response.json()
    return Delivery.objects.get(delivery_id=response.json()["delivery_id"])


def test_deliveries_to_a_chat_without_a_row_are_linked_when_the_chat_is_created(feedback_api):
    first = _delivered(feedback_api, "oc_later")
    second = _delivered(feedback_api, "oc_later")
    elsewhere = _delivered(feedback_api, "oc_still_unknown")
    assert (first.chat, first.sent_chat_id) == (None, "oc_later")

    chat = services.save_chat("test", Chat(chat_id="oc_later", name="Later"))

    linked = Delivery.objects.filter(chat=chat).values_list("delivery_id", flat=True)
    assert sorted(linked) == sorted([first.delivery_id, second.delivery_id])
    elsewhere.refresh_from_db()
    assert elsewhere.chat is None
    # a delivery after the chat exists is linked when it is made, as before
    assert _delivered(feedback_api, "oc_later").chat == chat


def test_renaming_a_chat_id_links_the_deliveries_sent_to_the_new_id(feedback_api):
    chat = services.save_chat("test", Chat(chat_id="oc_typo", name="Ops"))
    sent = _delivered(feedback_api, "oc_right")
    chat.chat_id = "oc_right"
    services.save_chat("test", chat)
    sent.refresh_from_db()
    assert sent.chat == chat


def test_linking_is_part_of_the_chat_save_transaction(feedback_api, monkeypatch):
    sent = _delivered(feedback_api, "oc_atomic")

    def audit_fails(*args, **kwargs):
        raise RuntimeError("audit down")

    monkeypatch.setattr(services.audit, "record", audit_fails)
    with pytest.raises(RuntimeError):
        services.save_chat("test", Chat(chat_id="oc_atomic"))
    assert not Chat.objects.filter(chat_id="oc_atomic").exists()
    sent.refresh_from_db()
    assert sent.chat is None


def test_the_admin_creating_a_chat_links_its_deliveries(feedback_api, admin_client):
    from botadmin.tests.conftest import admin_form_data

    sent = _delivered(feedback_api, "oc_from_admin")
    url = "/admin/botadmin/chat/add/"
    data = admin_form_data(admin_client.get(url))
    data.update({"chat_id": "oc_from_admin", "name": "From the admin", "chat_type": "group"})
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    sent.refresh_from_db()
    assert sent.chat == Chat.objects.get(chat_id="oc_from_admin")
