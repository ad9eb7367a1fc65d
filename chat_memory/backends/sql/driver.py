"""The SQL store's hot path on the driver's cursor: each prebuilt statement of
:class:`~chat_memory.backends.sql.statements.Statements` is compiled once per dialect (and
per length of its ``IN`` lists) to the driver's SQL string and a plan of its parameters, then
run on the DBAPI cursor of the connection the transaction already holds.

SQLAlchemy's ``Connection.execute`` costs more in Python than SQLite takes to run a statement
(the compiled-cache look-up, the execution context, result processing and the events of each
statement). What it does for us is kept: the transaction (BEGIN, COMMIT, ROLLBACK and their
events), the pool, the bind processors of the column types (SQLite's DateTime and Boolean),
``before_cursor_execute`` and ``after_cursor_execute`` for whoever listens on the engine (the
statement counts of the tests and the benchmark), and a driver error raised as SQLAlchemy raises it
(:class:`sqlalchemy.exc.DBAPIError`, the connection invalidated when the error means it is
gone). Rows come back as the driver's tuples: the callers read them by position.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

#: How SQLAlchemy marks an expanding ``IN`` parameter in a compiled string.
_EXPANDING = re.compile(r"__\[POSTCOMPILE_(\w+)\]")
_NAMED = re.compile(r"%\((\w+)\)s")
#: Compiled variants kept per statement (one per dialect and per length of its ``IN`` lists):
#: beyond this a statement is compiled at each call rather than the cache growing unbounded.
_VARIANTS_PER_STATEMENT = 64

Processor = Callable[[Any], Any]


@dataclass(frozen=True)
class _Slot:
    """One parameter of a compiled statement: where its value comes from (a key of the
    caller's parameters, or ``constant`` when the statement holds the value itself), its
    driver name (pyformat), the type's bind processor and whether it expands to a list."""

    source: str | None
    name: str
    processor: Processor | None
    constant: Any
    expanding: bool


@dataclass(frozen=True)
class Compiled:
    """A statement as the driver takes it: its SQL and how to build its parameters."""

    sql: str
    positional: bool
    slots: tuple[_Slot, ...]
    _flat: tuple[tuple[str | None, Any, Processor | None], ...] | None = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # the common case, built with one comprehension: positional, no IN list
        flat = self.positional and not any(slot.expanding for slot in self.slots)
        object.__setattr__(
            self,
            "_flat",
            tuple((s.source, s.constant, s.processor) for s in self.slots) if flat else None,
        )

    def _value(self, slot: _Slot, params: Mapping[str, Any]) -> Any:
        value = params[slot.source] if slot.source is not None else slot.constant
        if slot.processor is None or value is None:
            return value
        return slot.processor(value)

    def parameters(self, params: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        """The driver's parameters for ``params`` (named as the statement's ``b_…`` binds)."""
        flat = self._flat
        if flat is not None:
            # one comprehension, no generator inside it (a one-item tuple is a binding)
            return [
                value if process is None or value is None else process(value)
                for source, constant, process in flat
                for value in (constant if source is None else params[source],)
            ]
        if self.positional:
            values: list[Any] = []
            for slot in self.slots:
                if slot.expanding:
                    items = params[slot.source] if slot.source is not None else slot.constant
                    process = slot.processor
                    values.extend(items if process is None else [process(i) for i in items])
                else:
                    values.append(self._value(slot, params))
            return values
        named: dict[str, Any] = {}
        for slot in self.slots:
            if slot.expanding:
                items = params[slot.source] if slot.source is not None else slot.constant
                for i, item in enumerate(items, 1):
                    named[f"{slot.name}_{i}"] = (
                        item if slot.processor is None else slot.processor(item)
                    )
            else:
                named[slot.name] = self._value(slot, params)
        return named


def compile_for(
    statement: sa.Executable,
    dialect: sa.Dialect,
    params: Mapping[str, Any],
    column_keys: Sequence[str] | None = None,
) -> Compiled:
    """Compile ``statement`` for ``dialect``, its ``IN`` lists at the lengths ``params`` (or
    the statement's own constants) give them; ``column_keys``: the columns of an INSERT."""
    assert isinstance(statement, sa.ClauseElement)
    compiled = statement.compile(
        dialect=dialect, column_keys=list(column_keys) if column_keys is not None else None
    )
    if not isinstance(compiled, SQLCompiler):
        raise TypeError(f"statement ({statement!r}) does not compile to SQL")
    binds = compiled.binds
    sql = compiled.string
    positional = bool(compiled.positional)
    lengths: dict[str, int] = {}
    for name in _EXPANDING.findall(sql):
        items = params[name] if name in params else binds[name].value
        if not items:
            raise ValueError(f"IN list {name!r} is empty: the driver path needs one value or more")
        lengths[name] = len(items)
    if positional:
        marker = "?" if dialect.paramstyle == "qmark" else "%s"
        if dialect.paramstyle not in ("qmark", "format"):
            raise ValueError(f"paramstyle {dialect.paramstyle!r} is not supported here")
        sql = _EXPANDING.sub(lambda m: ", ".join([marker] * lengths[m.group(1)]), sql)
        names: Sequence[str] = compiled.positiontup or ()
    else:
        if dialect.paramstyle != "pyformat":
            raise ValueError(f"paramstyle {dialect.paramstyle!r} is not supported here")
        sql = _EXPANDING.sub(
            lambda m: ", ".join(f"%({m.group(1)}_{i})s" for i in range(1, lengths[m.group(1)] + 1)),
            sql,
        )
        # each name once: a bind used twice is one parameter of the driver
        names = list(dict.fromkeys([*_NAMED.findall(sql), *lengths]))
        names = [n for n in names if n in binds]
    slots = []
    for name in names:
        bind = binds[name]
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        given = name in params
        constant = None if given else bind.value
        expanding = name in lengths
        if not given and processor is not None and constant is not None:
            # a value of the statement itself: processed once, here
            constant = [processor(i) for i in constant] if expanding else processor(constant)
            processor = None
        slots.append(_Slot(name if given else None, name, processor, constant, expanding))
    return Compiled(sql, positional, tuple(slots))


class Driver:
    """Runs prebuilt statements on the DBAPI cursor of a SQLAlchemy connection inside its
    transaction (sync, or the sync face ``run_sync`` gives an async connection: its DBAPI
    connection is then SQLAlchemy's adapter of the async driver)."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[Any, ...], Compiled] = {}
        self._variants: dict[int, int] = {}
        # the statements cached, kept alive so that their ids stay theirs
        self._statements: dict[int, sa.Executable] = {}

    def _compile(
        self,
        connection: sa.Connection,
        statement: sa.Executable,
        params: Mapping[str, Any],
        column_keys: Sequence[str] | None,
    ) -> Compiled:
        dialect = connection.dialect
        key = (id(statement), dialect.name, _list_lengths(params), tuple(column_keys or ()))
        found = self._compiled.get(key)
        if found is not None:
            return found
        compiled = compile_for(statement, dialect, params, column_keys)
        if self._variants.get(id(statement), 0) < _VARIANTS_PER_STATEMENT:
            self._statements[id(statement)] = statement
            self._variants[id(statement)] = self._variants.get(id(statement), 0) + 1
            self._compiled[key] = compiled
        return compiled

    def rows(
        self, connection: sa.Connection, statement: sa.Executable, params: Mapping[str, Any]
    ) -> list[Any]:
        """The rows of a SELECT, as the driver's tuples."""
        if _has_empty_list(params):
            return list(connection.execute(statement, params))
        compiled = self._compile(connection, statement, params, None)
        rows: list[Any] = _run(connection, compiled.sql, compiled.parameters(params), fetch=True)
        return rows

    def run(
        self, connection: sa.Connection, statement: sa.Executable, params: Mapping[str, Any]
    ) -> int:
        """Run an UPDATE or DELETE; its row count."""
        if _has_empty_list(params):
            counted: int = connection.execute(statement, params).rowcount
            return counted
        compiled = self._compile(connection, statement, params, None)
        count: int = _run(connection, compiled.sql, compiled.parameters(params), fetch=False)
        return count

    def insert_many(
        self, connection: sa.Connection, statement: sa.Executable, rows: Sequence[dict[str, Any]]
    ) -> None:
        """Insert ``rows`` (dicts with the same keys) with the driver's ``executemany``."""
        if not rows:
            return
        compiled = self._compile(connection, statement, rows[0], list(rows[0]))
        many = [compiled.parameters(row) for row in rows]
        if len(many) == 1:
            _run(connection, compiled.sql, many[0], fetch=False)
        else:
            _run(connection, compiled.sql, many, fetch=False, many=True)


def run_on_driver(connection: sa.Connection, sql: str) -> None:
    """Run ``sql``, a statement without parameters nor rows (``BEGIN IMMEDIATE``), on the
    connection's DBAPI cursor (see :func:`_run`)."""
    _run(connection, sql, (), fetch=False)


def _has_empty_list(params: Mapping[str, Any]) -> bool:
    """An empty ``IN`` list: SQLAlchemy renders each dialect's empty-set expression for it,
    so such a (rare) statement goes through ``Connection.execute``."""
    for value in params.values():  # a loop, not any(): this runs for every statement
        if isinstance(value, list) and not value:
            return True
    return False


def _list_lengths(params: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The name and length of each ``IN`` list of ``params`` (part of a compiled variant's key)."""
    return tuple([(name, len(value)) for name, value in params.items() if isinstance(value, list)])


def _run(
    connection: sa.Connection, sql: str, parameters: Any, *, fetch: bool, many: bool = False
) -> Any:
    """One statement on the connection's DBAPI cursor, its events dispatched and its driver
    errors raised as SQLAlchemy raises them."""
    dbapi_connection = connection.connection.dbapi_connection
    assert dbapi_connection is not None  # inside a transaction the connection is checked out
    cursor = dbapi_connection.cursor()
    # the engine's listeners (and the Engine class's): a connection's own dispatcher builds
    # each of its listener lists on first use, which costs more than the statement itself
    dispatch = connection.engine.dispatch
    try:
        if dispatch.before_cursor_execute:
            dispatch.before_cursor_execute(connection, cursor, sql, parameters, None, many)
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
        if dispatch.after_cursor_execute:
            dispatch.after_cursor_execute(connection, cursor, sql, parameters, None, many)
        return cursor.fetchall() if fetch else cursor.rowcount
    except connection.dialect.loaded_dbapi.Error as exc:
        _raise_wrapped(connection, exc, sql, parameters, cursor)
        raise  # unreachable: _raise_wrapped raises
    finally:
        cursor.close()


def _raise_wrapped(
    connection: sa.Connection, exc: BaseException, sql: str, parameters: Any, cursor: Any
) -> None:
    """Raise ``exc`` as ``Connection.execute`` would: wrapped in SQLAlchemy's DBAPIError
    subclass, and the connection invalidated (the pool then drops it) when the error means the
    database connection is gone."""
    dialect = connection.dialect
    gone = isinstance(exc, dialect.loaded_dbapi.Error) and dialect.is_disconnect(
        exc,
        connection.connection.dbapi_connection,
        cursor,
    )
    wrapped = sa.exc.DBAPIError.instance(
        sql,
        parameters,
        exc,
        dialect.loaded_dbapi.Error,
        connection_invalidated=gone,
        dialect=dialect,
    )
    if gone and not connection.invalidated:
        connection.invalidate(exc)
    raise wrapped from exc
