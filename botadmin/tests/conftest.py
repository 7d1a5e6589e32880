"""Fixtures for botadmin tests: English messages, a staff admin client, admin form data."""

from __future__ import annotations

import pytest
from django import forms
from django.utils import translation


@pytest.fixture(autouse=True)
def english():
    """Validation messages are asserted in English (the site default is zh-hans)."""
    with translation.override("en"):
        yield


@pytest.fixture
def staff(admin_client):
    """pytest-django's superuser client, asking for English pages."""
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return admin_client


def _put(data: dict, bound: forms.BoundField) -> None:
    value = bound.value()
    widget = bound.field.widget
    if isinstance(widget, forms.CheckboxInput):
        if value:
            data[bound.html_name] = "on"
    elif isinstance(widget, forms.CheckboxSelectMultiple | forms.SelectMultiple):
        data[bound.html_name] = [str(v) for v in (value or [])]
    elif value is None:
        data[bound.html_name] = ""
    else:
        data[bound.html_name] = str(value)


def admin_form_data(response) -> dict:
    """What a browser would post back unchanged from an admin add/change page."""
    data: dict = {}
    form = response.context["adminform"].form
    for name in form.fields:
        _put(data, form[name])
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for sub in [formset.management_form, *formset.forms]:
            for name in sub.fields:
                _put(data, sub[name])
    return data
