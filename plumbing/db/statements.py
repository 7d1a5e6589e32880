"""ORM statements compiled once per shape and run again with new values.

Building a Django queryset and compiling it to SQL costs CPU on every call: resolving each
`Q`, `F` and aggregate against the model, then rendering it — for a statement with a dozen
filtered aggregates a few milliseconds, more than a small query takes in the database. When
the same statement is run again and again with only its values changed (a date range, a team
id), that work yields the same SQL text every time. A `StatementCache` keeps that text per
*shape* and, on a later call of the same shape, only puts the new values into its parameters.

A kept statement's SQL always comes from the ORM (`aggregates` and `values_joined` only put a
join around kept statements) and is checked before it is kept:

- the caller names the shape (everything that changes the SQL text: which filters are present,
  which branch is taken) and passes the *values* as `Slot`s, each with the model field that
  adapts it (`Field.get_db_prep_value`, as the ORM's lookups do);
- on the first call of a shape the statement is compiled twice, once with the real values and
  once with unique marker values in every slot; the two SQL texts must be equal, every
  parameter that differs between them must be a marker (which tells where each slot's value
  goes; a slot found nowhere is a value this statement does not use), and putting the real
  values there must give back exactly the parameters the ORM produced. A shape that fails
  this check (a value that changes the SQL text, or one the ORM folds into it) is never
  kept: every call of it runs through the ORM. The check cannot see a value that changes
  the SQL only for *other* values than the two it tried: such a value belongs in the shape;
- rows are converted with the ORM's own converters (dates on SQLite, JSON fields …), so a
  cached call returns what `QuerySet.aggregate()` / `.values()` return.

`plain=True` on a call (and `CARDLOOP_STATEMENT_CACHE = False` in settings) runs the ORM
instead, so tests can compare both paths. The cache is per process and bounded (`MAX_SHAPES`,
then it starts over); a list slot's length is part of the shape. Thread-safe: entries are
immutable and replaced whole.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Field, Model, QuerySet
from django.db.models.sql.query import Query

#: Shapes kept per cache before it starts over (each entry is one SQL text and its plan).
MAX_SHAPES = 512

_INTEGER_TYPES = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "SmallAutoField",
        "IntegerField",
        "BigIntegerField",
        "SmallIntegerField",
        "PositiveIntegerField",
        "PositiveBigIntegerField",
        "PositiveSmallIntegerField",
    }
)
_TEXT_TYPES = frozenset({"CharField", "TextField", "SlugField"})


@dataclass(frozen=True)
class Slot:
    """One value of a statement: `value` (or a tuple of values, for `__in`) and the model
    `field` whose `get_db_prep_value` turns it into a parameter, as the ORM's lookups do.
    Supported fields: integer, text, date and datetime fields and foreign keys to them."""

    field: Field
    value: Any

    def is_list(self) -> bool:
        return isinstance(self.value, (tuple, list))


@dataclass(frozen=True)
class _Plan:
    """A kept statement: SQL text, parameter template, where each slot's values go
    (`(parameter index, slot name, element index or None)`), column names and converters."""

    sql: str
    template: tuple[Any, ...]
    positions: tuple[tuple[int, str, int | None], ...]
    names: tuple[str, ...]
    converters: dict[int, tuple[list, Any]]
    single: bool


#: Marks a shape that failed the check: it always runs through the ORM.
_UNCACHEABLE = object()


def _target(field: Field) -> Field:
    """The field whose type a value of `field` has (a foreign key's target)."""
    while getattr(field, "target_field", None) is not None and field.is_relation:
        field = field.target_field
    return field


def _marker(field: Field, n: int) -> Any:
    """A value of `field`'s type that no real statement parameter holds (the `n`-th)."""
    kind = _target(field).get_internal_type()
    if kind == "DateTimeField":
        return datetime(1971, 2, 3, 4, 5, 6, tzinfo=UTC) + timedelta(microseconds=7919 * (n + 1))
    if kind == "DateField":
        return date(1801, 1, 1) + timedelta(days=n)
    if kind in _INTEGER_TYPES:
        return 7_340_032_000_003 + 7919 * n
    if kind in _TEXT_TYPES:
        return f"\x1fslot-{n}-marker\x1f"
    raise TypeError(f"a statement slot cannot hold a {kind}")


def _prep(slot_field: Field, value: Any, connection) -> Any:
    return slot_field.get_db_prep_value(value, connection, prepared=False)


def _param_key(value: Any) -> Any:
    """A hashable, type-exact key of a parameter (1 and True and 1.0 differ)."""
    try:
        hash(value)
    except TypeError:
        return (type(value), repr(value))
    return (type(value), value)


class _CaptureQuery(Query):
    """A `Query` whose aggregation is compiled but not run: `get_aggregation` hands its
    compiler to `captured` and gets "no row" back."""

    captured: Any = None

    def get_compiler(self, using=None, connection=None, elide_empty=True):
        compiler = super().get_compiler(using, connection, elide_empty)
        query = self

        def execute_sql(*_args, **_kwargs):
            query.captured = compiler
            return None

        compiler.execute_sql = execute_sql
        return compiler


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]
    names: tuple[str, ...]
    converters: dict[int, tuple[list, Any]]


def _compile_aggregate(qs: QuerySet, aggregates: dict[str, Any]) -> _Compiled | None:
    query = qs.query.chain(klass=_CaptureQuery)
    query.get_aggregation(qs.db, aggregates)
    compiler = query.captured
    if compiler is None:  # the ORM chose a subquery (or nothing): not cacheable
        return None
    compiled = _sql_of(compiler)
    if compiled is None:
        return None
    cols = compiler.query.annotation_select
    return _Compiled(*compiled, tuple(cols), compiler.get_converters(cols.values()))


def _sql_of(compiler) -> tuple[str, tuple[Any, ...]] | None:
    """`(sql, params)` of `compiler`, or None when the ORM found the result empty without SQL
    (`EmptyResultSet`) or built none."""
    try:
        sql, params = compiler.as_sql()
    except EmptyResultSet:
        return None
    return (sql, tuple(params)) if sql else None


def _compile_values(qs: QuerySet) -> _Compiled | None:
    query = qs.query
    compiler = query.get_compiler(qs.db)
    compiled = _sql_of(compiler)
    if compiled is None:
        return None
    sql, params = compiled
    if query.selected:
        names = tuple(query.selected)
    else:
        names = (*query.extra_select, *query.values_select, *query.annotation_select)
    fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
    if len(names) != len(fields):
        return None
    return _Compiled(sql, tuple(params), names, compiler.get_converters(fields))


class StatementCache:
    """SQL texts of ORM statements per shape (see the module docstring).

    `aggregate(shape, slots, build)` returns what `QuerySet.aggregate()` returns and
    `values(shape, slots, build)` the list `QuerySet.values(...)` yields, where `build(values)`
    makes the statement from `values` (slot name → value): for `aggregate` a
    `(queryset, {alias: aggregate expression})` pair, for `values` a values-queryset. `build`
    must put every value that varies between calls of one shape through a slot, and `shape`
    must name everything else that changes the SQL (the check on first use catches most
    mistakes, not all). `plain=True` runs `build` through the ORM, uncached. Statements run
    on the database `using` (the querysets `build` makes must use it too, else they are
    never kept).
    """

    def __init__(self, name: str, using: str = "default"):
        self.name = name
        self.using = using
        self._plans: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every kept shape (tests)."""
        with self._lock:
            self._plans = {}

    def __len__(self) -> int:
        return len(self._plans)

    # -- public calls -----------------------------------------------------------------------

    def aggregate(
        self,
        shape: Hashable,
        slots: dict[str, Slot],
        build: Callable[[dict[str, Any]], tuple[QuerySet, dict[str, Any]]],
        *,
        plain: bool = False,
    ) -> dict[str, Any]:
        """`QuerySet.aggregate(**aggregates)` of `build(values)`: a dict alias → value."""
        if plain or not self.enabled():
            qs, aggregates = build(_values(slots))
            return qs.aggregate(**aggregates)
        rows = self._run(("aggregate", shape), slots, build, single=True)
        return rows[0]

    def values(
        self,
        shape: Hashable,
        slots: dict[str, Slot],
        build: Callable[[dict[str, Any]], QuerySet],
        *,
        plain: bool = False,
    ) -> list[dict[str, Any]]:
        """`list(build(values))` for a values-queryset: one dict per row."""
        if plain or not self.enabled():
            return list(build(_values(slots)))
        return self._run(("values", shape), slots, build, single=False)

    def values_joined(
        self,
        shape: Hashable,
        slots: dict[str, Slot],
        build: Callable[[dict[str, Any]], QuerySet],
        *,
        key: str,
        model: type[Model],
        fields: tuple[str, ...],
        plain: bool = False,
    ) -> list[dict[str, Any]] | None:
        """The rows of `values(shape, slots, build)`, each with `fields` of the `model` row
        whose primary key is the row's `key` column (None without one), in one statement:
        `SELECT q.*, j.<fields> FROM (kept SQL) q LEFT JOIN <model> j ON j.pk = q.<key>`.

        The ORM cannot say this (a subquery on an aggregate's value lands in its GROUP BY),
        and reading the joined rows afterwards costs a second round trip. The kept SQL is the
        ORM's; the join around it names only `model`'s table and columns, and the joined
        values are converted as `model.objects.values(*fields)` converts them. Returns None
        when `plain`, when the cache is off or the shape is not kept: the caller then reads
        the rows and the joined values its own way.
        """
        if plain or not self.enabled():
            return None
        connection = connections[self.using]
        plan = self._plan_for(("values", shape), slots, build, False)
        if plan is _UNCACHEABLE or key not in plan.names or set(fields) & set(plan.names):
            return None
        joined = self._joined(model, fields, connection)
        if joined is None:
            return None
        quote = connection.ops.quote_name
        columns = ", ".join(
            f"_joined.{quote(model._meta.get_field(name).column)}" for name in fields
        )
        # Only SQL the ORM compiled and the model's own names; every value stays a parameter.
        sql = (
            f"SELECT _kept.*, {columns} FROM ({plan.sql}) AS _kept "  # noqa: S608
            f"LEFT JOIN {quote(model._meta.db_table)} AS _joined "
            f"ON _joined.{quote(model._meta.pk.column)} = _kept.{quote(key)}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, _params(plan, slots, connection))
            rows = cursor.fetchall()
        width = len(plan.names)
        out = []
        for row in rows:
            item = _convert(plan, row[:width], connection)
            item.update(_convert(joined, row[width:], connection))
            out.append(item)
        return out

    def _joined(self, model: type[Model], fields: tuple[str, ...], connection) -> _Plan | None:
        """Names and converters of `model.objects.values(*fields)`, kept per model and fields."""
        cache_key = ("joined", self.using, connection.vendor, model._meta.label, fields)
        plan = self._plans.get(cache_key)
        if plan is None:
            compiled = _compile_values(model._default_manager.using(self.using).values(*fields))
            if compiled is None or compiled.names != fields:
                return None
            plan = _Plan("", (), (), compiled.names, compiled.converters, False)
            with self._lock:
                self._plans = {**self._plans, cache_key: plan}
        return plan

    def aggregates(
        self,
        *calls: tuple[
            Hashable,
            dict[str, Slot],
            Callable[[dict[str, Any]], tuple[QuerySet, dict[str, Any]]],
        ],
        plain: bool = False,
    ) -> list[dict[str, Any]]:
        """Several `aggregate(shape, slots, build)` calls in one statement, one round trip:
        `SELECT * FROM (first) CROSS JOIN (second) …` — each is an aggregate without GROUP
        BY, so each gives exactly one row. Returns their dicts in order. When any of them is
        not kept (see the module docstring), each runs on its own."""
        if plain or not self.enabled():
            return [self.aggregate(*call, plain=True) for call in calls]
        connection = connections[self.using]
        plans = [
            self._plan_for(("aggregate", shape), slots, build, True)
            for shape, slots, build in calls
        ]
        if any(plan is _UNCACHEABLE for plan in plans):
            return [self.aggregate(*call) for call in calls]
        # Only SQL the ORM compiled is joined here; every value stays a parameter.
        sql = "SELECT * FROM " + " CROSS JOIN ".join(  # noqa: S608
            f"({plan.sql}) AS _part{i}" for i, plan in enumerate(plans)
        )
        params: list[Any] = []
        for plan, (_shape, slots, _build) in zip(plans, calls, strict=True):
            params.extend(_params(plan, slots, connection))
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if len(rows) != 1:
            raise RuntimeError("aggregate statements joined gave other than one row")
        out, offset = [], 0
        for plan in plans:
            width = len(plan.names)
            out.append(_convert(plan, rows[0][offset : offset + width], connection))
            offset += width
        if offset != len(rows[0]):
            raise RuntimeError("aggregate statements joined gave other columns")
        return out

    @staticmethod
    def enabled() -> bool:
        """False when `settings.CARDLOOP_STATEMENT_CACHE` is false (every call runs the ORM)."""
        return bool(getattr(settings, "CARDLOOP_STATEMENT_CACHE", True))

    # -- machinery --------------------------------------------------------------------------

    def _key(self, shape, slots: dict[str, Slot], connection) -> Hashable:
        return (
            self.using,
            connection.vendor,
            shape,
            tuple((n, len(s.value)) for n, s in sorted(slots.items()) if s.is_list()),
        )

    def _plan_for(self, shape, slots: dict[str, Slot], build, single: bool, probe=None):
        """The kept plan of `shape` (made now on a first call), or `_UNCACHEABLE`."""
        key = self._key(shape, slots, connections[self.using])
        plan = self._plans.get(key)
        if plan is None:
            if probe is None:
                probe = build(_values(slots))
            plan = self._plan(slots, build, probe, single) or _UNCACHEABLE
            with self._lock:
                if len(self._plans) >= MAX_SHAPES:
                    self._plans = {}
                self._plans = {**self._plans, key: plan}
        return plan

    def _run(self, shape, slots: dict[str, Slot], build, *, single: bool) -> list[dict]:
        connection = connections[self.using]
        plan = self._plans.get(self._key(shape, slots, connection))
        if plan is None:
            probe = build(_values(slots))
            plan = self._plan_for(shape, slots, build, single, probe)
            if plan is _UNCACHEABLE:
                return _orm(probe, single)
        if plan is _UNCACHEABLE:
            return _orm(build(_values(slots)), single)
        return _execute(plan, slots, connection)

    def _plan(self, slots: dict[str, Slot], build, probe, single: bool) -> _Plan | None:
        real = _compile_aggregate(*probe) if single else _compile_values(probe)
        if real is None:
            return None
        markers: dict[str, Any] = {}
        n = 0
        for name in sorted(slots):
            slot = slots[name]
            if slot.is_list():
                # Increasing markers keep a sorted list sorted.
                markers[name] = tuple(_marker(slot.field, n + i) for i in range(len(slot.value)))
                n += len(slot.value)
            else:
                markers[name] = _marker(slot.field, n)
                n += 1
        marked_probe = build(markers)
        marked = _compile_aggregate(*marked_probe) if single else _compile_values(marked_probe)
        if marked is None or marked.sql != real.sql or len(marked.params) != len(real.params):
            return None
        qs = probe[0] if single else probe
        if qs.db != self.using:
            return None  # routed elsewhere: the ORM decides
        connection = connections[qs.db]
        where: dict[Any, tuple[str, int | None]] = {}
        for name in sorted(slots):
            field = slots[name].field
            if slots[name].is_list():
                for i, value in enumerate(markers[name]):
                    where[_param_key(_prep(field, value, connection))] = (name, i)
            else:
                where[_param_key(_prep(field, markers[name], connection))] = (name, None)
        # A slot found nowhere is a value this statement does not use (a filter that applies
        # to another statement of the same call): its value cannot change this SQL.
        positions = []
        for index, param in enumerate(marked.params):
            hit = where.get(_param_key(param))
            if hit is not None:
                positions.append((index, *hit))
            elif _param_key(param) != _param_key(real.params[index]):
                return None  # a parameter that differs but is no slot: the SQL depends on it
        plan = _Plan(
            sql=real.sql,
            template=marked.params,
            positions=tuple(positions),
            names=real.names,
            converters=real.converters,
            single=single,
        )
        if _params(plan, slots, connection) != list(real.params):
            return None
        return plan


def _orm(probe, single: bool) -> list[dict[str, Any]]:
    if single:
        qs, aggregates = probe
        return [qs.aggregate(**aggregates)]
    return list(probe)


def _values(slots: dict[str, Slot]) -> dict[str, Any]:
    return {name: slot.value for name, slot in slots.items()}


def _params(plan: _Plan, slots: dict[str, Slot], connection) -> list[Any]:
    params = list(plan.template)
    for index, name, element in plan.positions:
        slot = slots[name]
        value = slot.value if element is None else slot.value[element]
        params[index] = _prep(slot.field, value, connection)
    return params


def _convert(plan: _Plan, row: Sequence, connection) -> dict[str, Any]:
    """One fetched row as the ORM returns it: converted, keyed by column name."""
    if plan.converters:
        row = list(row)
        for pos, (convs, expression) in plan.converters.items():
            value = row[pos]
            for convert in convs:
                value = convert(value, expression, connection)
            row[pos] = value
    return dict(zip(plan.names, row, strict=True))


def _execute(plan: _Plan, slots: dict[str, Slot], connection) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(plan.sql, _params(plan, slots, connection))
        rows: Sequence = cursor.fetchall()
    out = [_convert(plan, row, connection) for row in rows]
    if plan.single and len(out) != 1:
        raise RuntimeError("an aggregate statement gave other than one row")
    return out
