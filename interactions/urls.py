"""URL routes of the interactions app."""

from django.urls import path

from interactions.lark import ingress

urlpatterns = [
    path("lark/<str:app_id>/callback", ingress.callback, name="lark-callback"),
]
