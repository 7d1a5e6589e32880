"""`insert_row`: one model instance inserted as `Model.save(force_insert=True)` inserts it, minus
the ORM's query building — for the rows every feedback click writes (revision, latest
feedback, event, card update), where building the INSERT cost more CPU than PostgreSQL spent
running it (about 0.55 ms a click for the four rows, measured interleaved in one process;
`bench/README.md`).

Same values as the ORM: each concrete field's `pre_save(obj, add=True)` (`auto_now`,
`auto_now_add`) and `get_db_prep_save` (datetimes for SQLite, JSON for both databases), the
same columns, `RETURNING` the primary key (PostgreSQL; SQLite ≥ 3.35). Not the same: no
`pre_save` / `post_save` signals (Cardloop connects none to these models) and no
`full_clean`, exactly like `QuerySet.bulk_create`.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Model

_SQL: dict[type, tuple[str, list]] = {}


def quoted_table(model: type[Model]) -> str:
    """`model`'s table name quoted for this database, for hand-written SQL on the click path
    (the names come from our models, never from input)."""
    return connection.ops.quote_name(model._meta.db_table)


def _statement(model: type[Model]) -> tuple[str, list]:
    cached = _SQL.get(model)
    if cached is None:
        meta = model._meta
        fields = [
            f
            for f in meta.local_concrete_fields
            if f is not meta.auto_field and not getattr(f, "generated", False)
        ]
        quote = connection.ops.quote_name
        sql = (
            f"INSERT INTO {quoted_table(model)} "  # noqa: S608 - names from our models
            f"({', '.join(quote(f.column) for f in fields)}) "
            f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {quote(meta.pk.column)}"
        )
        cached = _SQL[model] = (sql, fields)
    return cached


def insert_row(obj: Model) -> Model:
    """INSERT `obj` (a new instance with an auto primary key) in the caller's transaction and
    return it with its `pk` set, saved. Raises the database's IntegrityError like `save()`.

    Falls back to `obj.save(force_insert=True)` where the shortcut would differ: a primary
    key already set, a database default (`db_default`) or expression as a value, or a
    database that cannot return the inserted id.
    """
    meta = obj._meta
    if (
        obj.pk is not None
        or meta.auto_field is None
        or not connection.features.can_return_columns_from_insert
    ):
        obj.save(force_insert=True)
        return obj
    sql, fields = _statement(type(obj))
    values = []
    for f in fields:
        value = f.pre_save(obj, True)
        if hasattr(value, "resolve_expression"):  # DatabaseDefault, F(), Now() …
            obj.save(force_insert=True)
            return obj
        values.append(f.get_db_prep_save(value, connection))
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        (pk,) = cursor.fetchone()
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias
    return obj
