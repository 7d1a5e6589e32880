"""Admin building blocks shared by every app's admin (no models of their own).

- `ReadOnlyAdmin`: listing and detail pages only, for rows that only services write.
- `two_way_filter(...)`: a sidebar list filter with exactly two choices, each a queryset
  transform (`active` / `revoked`, `yes` / `no`, …).
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin
from django.db.models import QuerySet

QuerysetTransform = Callable[[QuerySet], QuerySet]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Listing and detail pages only: no add, change or delete (rows written only by services;
    staff look, they do not edit)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def two_way_filter(
    title,
    parameter_name: str,
    first: tuple[str, object, QuerysetTransform],
    second: tuple[str, object, QuerysetTransform],
) -> type[admin.SimpleListFilter]:
    """A `SimpleListFilter` class with two choices.

    `first` and `second` are `(value in the URL, label, queryset -> filtered queryset)`; any
    other value (or none) leaves the queryset unfiltered. Example::

        TokenStatusFilter = two_way_filter(
            _("status"), "status",
            ("active", _("active"), lambda qs: qs.filter(revoked_at__isnull=True)),
            ("revoked", _("revoked"), lambda qs: qs.filter(revoked_at__isnull=False)),
        )
    """
    choices = {first[0]: first[2], second[0]: second[2]}

    def lookups(self, request, model_admin):
        return [(first[0], first[1]), (second[0], second[1])]

    def queryset(self, request, queryset):
        transform = choices.get(self.value())
        return transform(queryset) if transform else queryset

    return type(
        f"{parameter_name.title().replace('_', '')}Filter",
        (admin.SimpleListFilter,),
        {
            "title": title,
            "parameter_name": parameter_name,
            "lookups": lookups,
            "queryset": queryset,
            "__doc__": f"Two-way list filter on {parameter_name!r}.",
        },
    )
