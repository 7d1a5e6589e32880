"""URL route of the Telegram webhook (mounted in `cardloop/urls.py`)."""

from django.urls import path

from interactions.channels.telegram import ingress

urlpatterns = [
    path("telegram/<int:bot_user_id>/webhook", ingress.webhook, name="telegram-webhook"),
]
