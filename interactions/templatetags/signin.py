"""`{% load signin %}{% feishu_signin_url next %}`: the "Sign in with Feishu" link for the sign-in
pages, or "" when sign-in with Feishu is off (`interactions.signin.service.signin_bot`)."""

from __future__ import annotations

from urllib.parse import urlencode

from django import template
from django.urls import reverse

from interactions.signin import service

register = template.Library()


@register.simple_tag
def feishu_signin_url(next_url: str = "") -> str:
    """`/auth/feishu/login?next=<next_url>`, or "" when sign-in with Feishu is off."""
    if service.signin_bot() is None:
        return ""
    query = f"?{urlencode({'next': next_url})}" if next_url else ""
    return reverse("feishu-signin") + query
