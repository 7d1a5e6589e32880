"""Every model and field label of Cardloop's apps is translated into zh-hans.

A field without `verbose_name` gets Django's automatic label (its name with spaces), which is
never translated: the admin showed "Created at", "Response kind", "Session id", … in Chinese.
"""

from __future__ import annotations

import re

from django.apps import apps
from django.utils import translation

APPS = ["botadmin", "interactions", "feedback", "analytics"]
CJK = re.compile("[\u4e00-\u9fff]")


def _untranslated(label) -> bool:
    with translation.override("en"):
        en = str(label)
    with translation.override("zh-hans"):
        zh = str(label)
    return zh == en and not CJK.search(zh)


def _labels():
    for app_label in APPS:
        for model in apps.get_app_config(app_label).get_models():
            name = f"{app_label}.{model.__name__}"
            yield f"{name} (verbose_name)", model._meta.verbose_name
            yield f"{name} (verbose_name_plural)", model._meta.verbose_name_plural
            for field in model._meta.get_fields():
                if not field.concrete or field.auto_created:
                    continue
                if field.primary_key and field.name == "id":
                    continue
                yield f"{name}.{field.name}", field.verbose_name


def test_every_model_and_field_label_is_translated():
    offenders = [f"{where}: {label!s}" for where, label in _labels() if _untranslated(label)]
    print("\n".join(offenders))
    assert offenders == [], f"{len(offenders)} untranslated labels:\n" + "\n".join(offenders)


def test_the_check_sees_fields():
    assert sum(1 for _ in _labels()) > 100
