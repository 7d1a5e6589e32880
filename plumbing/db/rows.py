"""`insert_row`, `select_one` and `columns_of`, for the rows every feedback click writes and reads.

`insert_row`: one model instance inserted as `Model.save(force_insert=True)` inserts it, minus
the ORM's query building — for the rows every feedback click writes (revision, latest
feedback, event, card update), where building the INSERT cost more CPU than PostgreSQL spent
running it (about 0.55 ms a click for the four rows, measured interleaved in one process;
`bench/README.md`).

Same values as the ORM: each concrete field's `pre_save(obj, add=True)` (`auto_now`,
`auto_now_add`) and `get_db_prep_save` (datetimes for SQLite, JSON for both databases), the
same columns, `RETURNING` the primary key (PostgreSQL; SQLite ≥ 3.35). Not the same: no
`pre_save` / `post_save` signals (Cardloop connects none to these models) and no
`full_clean`, exactly like `QuerySet.bulk_create`.

`select_one`: the first row of a hand-written `SELECT` as a model instance, like
`next(iter(Model.objects.raw(sql, params)), None)` — same values (every column through the
converters the ORM applies: SQLite datetimes, JSON, booleans; `Model.from_db`), extra columns
set as attributes — with what `RawQuerySet` works out on every call (which column is which
field, the converters of each) worked out once per model and column list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection
from django.db.models import Model

_SQL: dict[type, tuple[str, list]] = {}
#: (model, vendor, column names) → (attnames, (row index, converters) per field, extra columns)
_READERS: dict[tuple, tuple] = {}


def quoted_table(model: type[Model]) -> str:
    """`model`'s table name quoted for this database, for hand-written SQL on the click path
    (the names come from our models, never from input)."""
    return connection.ops.quote_name(model._meta.db_table)


_COLUMNS: dict[tuple, str] = {}


def columns_of(model: type[Model], alias: str | None = None) -> str:
    """`model`'s concrete columns, quoted for this database and comma-separated (each as
    `alias.column` when `alias` is given), for a hand-written SELECT instead of `*`.

    Why not `*`: with `DATABASE_PREPARED_STATEMENTS` PostgreSQL prepares a statement a pooled
    connection runs often, and a prepared `SELECT *` fails with "cached plan must not change
    result type" once a migration adds a column to its table, until that connection closes.
    Named columns keep it valid across an added column (not across a changed column type,
    which breaks any prepared statement reading it). Built once per model and alias."""
    key = (model, alias, connection.vendor)
    cached = _COLUMNS.get(key)
    if cached is None:
        quote = connection.ops.quote_name
        prefix = f"{alias}." if alias else ""
        cached = _COLUMNS[key] = ", ".join(
            prefix + quote(f.column) for f in model._meta.concrete_fields
        )
    return cached


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


def insert_statement(model: type[Model]) -> tuple[str, list[str]]:
    """`INSERT INTO <table> (<columns>) VALUES (%s, …) RETURNING <pk>` of `model` (every
    concrete field but the auto primary key, quoted for this database) and those columns'
    quoted names, in the order `insert_values` gives the values. Built once per model."""
    sql, fields = _statement(model)
    quote = connection.ops.quote_name
    return sql, [quote(f.column) for f in fields]


def insert_values(obj: Model) -> list[Any] | None:
    """The values `insert_row` writes for the new instance `obj`, in `insert_statement`'s
    column order (`pre_save(obj, add=True)`, then `get_db_prep_save`); None when one of them
    is an expression (a `db_default`, `F()`, `Now()`), which only `save()` can write."""
    values = []
    for f in _statement(type(obj))[1]:
        value = f.pre_save(obj, True)
        if hasattr(value, "resolve_expression"):
            return None
        values.append(f.get_db_prep_save(value, connection))
    return values


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
    sql, _fields = _statement(type(obj))
    values = insert_values(obj)
    if values is None:  # DatabaseDefault, F(), Now() …
        obj.save(force_insert=True)
        return obj
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        (pk,) = cursor.fetchone()
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias
    return obj


def insert_row_from(
    obj: Model, field: str, column: str, source: str, params: Sequence[Any], *, conflict: str
) -> Model | None:
    """INSERT `obj` (a new instance with an auto primary key) with its foreign key `field`
    taken from a row the same statement selects, in the caller's transaction: `INSERT …
    SELECT <obj's values>, <column> <source> <conflict> RETURNING pk, fk`
    — the lookup of the parent row and the insert in one statement. Returns `obj` saved with
    its `pk` and `field` set, or None when nothing was inserted (`source` found no row, or
    the `conflict` clause, an `ON CONFLICT … DO NOTHING`, skipped it).

    `column`: the selected parent key (`e.id`); `source`: the rest of that SELECT, starting at FROM and selecting one
    row (`FROM t WHERE … [FOR UPDATE OF t]`; on SQLite it must end with its WHERE clause,
    which tells SQLite's parser where the SELECT ends and the upsert clause begins). Only the
    columns whose values are not None are written (NULL is every nullable column's default):
    a NULL of unknown type in a SELECT list would be text to PostgreSQL, which a typed column
    refuses. Values as `insert_row` computes them (`pre_save`, `get_db_prep_save`); an
    expression as a value raises ValueError. Raises the database's errors as they come."""
    meta = obj._meta
    target = meta.get_field(field)
    _sql, fields = _statement(type(obj))
    columns, values = [], []
    for f in fields:
        if f is target:
            continue
        value = f.pre_save(obj, True)
        if hasattr(value, "resolve_expression"):
            raise ValueError(f"insert_row_from cannot write an expression into {f.attname}")
        value = f.get_db_prep_save(value, connection)
        if value is None:
            continue
        columns.append(f.column)
        values.append(value)
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quoted_table(type(obj))} "  # noqa: S608 - names from our models
        f"({', '.join(quote(c) for c in columns)}, {quote(target.column)}) "
        f"SELECT {', '.join(['%s'] * len(values))}, {column} {source} {conflict} "
        f"RETURNING {quote(meta.pk.column)}, {quote(target.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, *params])
        row = cursor.fetchone()
    if row is None:
        return None
    obj.pk, parent = row
    setattr(obj, target.attname, parent)
    obj._state.adding = False
    obj._state.db = connection.alias
    return obj


def _reader(model: type[Model], columns: tuple[str, ...]):
    key = (model, connection.vendor, columns)
    reader = _READERS.get(key)
    if reader is None:
        index_of = {column: index for index, column in enumerate(columns)}
        plan: list[tuple[int, list[tuple[Callable, Any]]]] = []
        names: list[str] = []
        for field in model._meta.concrete_fields:  # Model.from_db takes values in this order
            index = index_of.get(field.column)
            if index is None:
                continue
            col = field.get_col(model._meta.db_table)
            # what `SQLCompiler.get_converters` applies to a selected column
            found = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
            plan.append((index, [(converter, col) for converter in found]))
            names.append(field.attname)
        if model._meta.pk.attname not in names:
            raise ValueError(f"the SELECT must return the primary key of {model.__name__}")
        known = {f.column for f in model._meta.concrete_fields}
        extra = [(index, column) for index, column in enumerate(columns) if column not in known]
        reader = _READERS[key] = (names, plan, extra)
    return reader


def select_one(model: type[Model], sql: str, params: Sequence[Any]) -> Model | None:
    """The first row of `sql` (a SELECT of `model`'s columns, `*` or named, in the caller's
    transaction) as a `model` instance loaded from the database (`Model.from_db`), or None
    when there is no row. A column that is not one of the model's concrete fields (an
    annotation such as a subquery `AS pending_pk`) is set as an attribute of that name.
    Raises ValueError when the primary key column is missing, the database's errors as
    they come."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        columns = tuple(d[0] for d in cursor.description)
    names, plan, extra = _reader(model, columns)
    values = []
    for index, chain in plan:
        value = row[index]
        for converter, col in chain:
            value = converter(value, col, connection)
        values.append(value)
    obj = model.from_db(connection.alias, names, values)
    for index, column in extra:
        setattr(obj, column, row[index])
    return obj
