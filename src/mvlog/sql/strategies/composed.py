"""A query made of pieces mvlog keeps, whose composition it cannot key: several aggregated CTEs
joined (TPC-DS q31, q58), an aggregate over an aggregate that does not fold (TPC-H Q13's count of
counts), a window over an aggregate (q12's share of a class), an aggregate over a UNION ALL of
aggregates (q33), INTERSECT of DISTINCT selects (q38), uncorrelated scalar aggregates (q09).

Each piece (:mod:`mvlog.sql.pieces.decompose` finds them) is a view of its own shape, kept fast by its own
strategy (its key map and group tables named after the view: ``keys$_<view>_<hash>_p<i>``), and
its whole result is kept in PostgreSQL (``mvlog."inner$_<view>_<hash>_p<i>"``). The query on top
is recomputed on each refresh from those results with each piece's changed rows in place, so it
costs the pieces' results (and whatever else it reads), not their base tables. Its rows have no
key of their own: each is keyed by its text and its number among equal rows (``_mvlog_row_key``,
``_mvlog_dup``). The keys of the last refresh are kept too (``mvlog."outer$_<view>_<hash>"``: the
query's other tables may have changed since, so they cannot be computed again); a refresh writes
the keys of both, and a row equal before and after keeps its key and hash and is not written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, PRESENT
from mvlog.sql.analyze.analysis import ViewClass
from mvlog.sql.generate.changes import key_names, keys_match
from mvlog.sql.generate.keymap import analyze_sql, qualified, refill_sql, state_table
from mvlog.sql.parse.sqltree import DIALECT, parsed, sql_text, with_ctes
from mvlog.sql.pieces.shape import (
    ROW_KEY_COLUMN,
    Composition,
    Piece,
    ViewShape,
    col,
    ident,
    inner_name,
    outer_keys_name,
    piece_name,
    relation,
)
from mvlog.sql.strategies.strategy import CARRIED, ColumnsOf, KeptKeys, Scratch, Strategy, StrategyOf

DUP = HIDDEN_PREFIX + "dup"  # a row's number among equal rows
OUT_NEW = HIDDEN_PREFIX + "out_new"
SCRATCH = HIDDEN_PREFIX + "scratch"  # + i: piece i's fast read, run once by the record


def _names(i: int) -> tuple[str, str, str]:
    """CHANGED, OLD and NEW of piece ``i``: its fast read, its rows before, its rows after."""
    return tuple(f"{HIDDEN_PREFIX}{what}{i}" for what in ("changed", "old", "new"))  # type: ignore[return-value]


def _whole_row_text(alias: str) -> exp.Expr:
    """``CAST(ROW(<alias>.*) AS text)``: a relation's whole row as one text."""
    return exp.cast(exp.Anonymous(this="ROW", expressions=[exp.column(exp.Star(), table=ident(alias))]),
                    exp.DataType.build("text"))


def keyed(select: exp.Expr | str) -> exp.Select:
    """``SELECT o.*, <the row as text>, <its number among equal rows> FROM (select) o``."""
    text = _whole_row_text("o")
    dup = exp.Window(this=exp.Anonymous(this="row_number"), partition_by=[text.copy()])
    query = parsed(select) if isinstance(select, str) else select
    return (exp.select(exp.column(exp.Star(), table=ident("o")), exp.alias_(text, ident(ROW_KEY_COLUMN)),
                       exp.alias_(dup, ident(DUP)))
            .from_(exp.Subquery(this=query, alias=exp.TableAlias(this=ident("o")))))


def keep_composed(shape: ViewShape, pieces: Sequence[tuple[ViewShape, Sequence[str]]], outer: str,
                  query: str) -> ViewShape:
    """The view ``shape`` (complete-only as analysed) kept over its fast ``pieces`` (each: its
    shape and its columns as written), ``outer`` reading piece ``i`` as :func:`relation` ``(i)``."""
    kept = tuple(Piece(inner, relation(i), inner_name(piece_name(shape.name, i)), tuple(columns))
                 for i, (inner, columns) in enumerate(pieces, start=1))
    logs = tuple(dict.fromkeys([*shape.logs, *(log for piece in kept for log in piece.inner.logs)]))
    return ViewShape(shape.name, ViewClass.COMPOSED, (), logs, (ROW_KEY_COLUMN, DUP), (ROW_KEY_COLUMN, DUP),
                     sql_text(keyed(query)),
                     composed=Composition(kept, outer, outer_keys_name(shape.name)))


def _over(composition: Composition, relations: Sequence[str]) -> exp.Select:
    """The query on top over ``relations`` (per piece, a CTE holding its rows), keyed."""
    names = {piece.relation: name for piece, name in zip(composition.pieces, relations)}
    tree = parsed(composition.outer_sql)
    for table in list(tree.find_all(exp.Table)):
        if table.name in names and not table.db:
            table.set("this", ident(names[table.name]))
    return keyed(tree)


def _scratch_table(i: int) -> exp.Table:
    return exp.Table(this=ident(f"{SCRATCH}{i}"), db=ident("pg_temp"))


def scratch_sql(i: int, read: str) -> Scratch:
    """Piece ``i``'s fast read ``read`` as a temporary table of the record's session, filled by
    computing it or from its rows as a carrying read returned them (their texts, an array)."""
    table = _scratch_table(i)
    rows = exp.select(exp.Star()).from_(exp.Subquery(this=parsed(read), alias=exp.TableAlias(this=ident("r"))))
    create = exp.Create(this=table, kind="TABLE", expression=rows.limit(0),
                        properties=exp.Properties(expressions=[exp.TemporaryProperty()]))
    parameter = f"{SCRATCH}{i}_rows"
    # The texts cast to the table's row type (each element by its input function: the row's text
    # as PostgreSQL wrote it reads back exactly), unnested into its columns.
    row_type = exp.DataType.build(f'pg_temp."{SCRATCH}{i}"[]', udt=True, dialect=DIALECT)
    texts = exp.Cast(this=exp.Placeholder(this=parameter), to=exp.DataType.build("TEXT[]", dialect=DIALECT))
    carried = exp.insert(exp.select(exp.Star()).from_(exp.Unnest(expressions=[exp.Cast(this=texts, to=row_type)])),
                         table.copy())
    return Scratch(sql_text(create), sql_text(exp.insert(parsed(read), table.copy())),
                   sql_text(exp.Analyze(tables=[table.copy()])), f"DROP TABLE {sql_text(table)}",
                   (sql_text(carried), parameter))


def scratch_reads(composition: Composition) -> list[str]:
    """Each piece's fast read as the record has it: its :func:`scratch_sql` table."""
    return [sql_text(exp.select(exp.Star()).from_(_scratch_table(i))) for i in range(1, len(composition.pieces) + 1)]


def _rows_before(piece: Piece) -> exp.Select:
    """OLD: piece ``piece``'s rows as the last refresh left them (its table in mvlog)."""
    return exp.select(*[col(c) for c in piece.columns]).from_(state_table(piece.table))


def _new_rows_ctes(composition: Composition, changed: Sequence[str]) -> list[tuple[str, exp.Expr]]:
    """Per piece: CHANGED (its fast read), OLD (its rows before) and NEW (its rows after); then
    OUT_NEW (the view after, keyed)."""
    ctes: list[tuple[str, exp.Expr]] = []
    news = []
    for i, (piece, read) in enumerate(zip(composition.pieces, changed), start=1):
        changed_i, old, new = _names(i)
        cols = [col(c) for c in piece.columns]
        unchanged = exp.not_(exp.Exists(this=exp.select(exp.Literal.number(1)).from_(changed_i)
                                        .where(keys_match(piece.inner.key_columns, changed_i, "o"))))
        rows = exp.union(exp.select(*[col(c, "o") for c in piece.columns]).from_(exp.Table(
            this=ident(old), alias=exp.TableAlias(this=ident("o")))).where(unchanged),
            exp.select(*cols).from_(changed_i).where(col(PRESENT)), distinct=False)
        ctes += [(changed_i, parsed(read)),
                 (old, _rows_before(piece)), (new, rows)]
        news.append(new)
    return [*ctes, (OUT_NEW, _over(composition, news))]


def read_sql(composition: Composition, changed: Sequence[str], carry: bool = False) -> str:
    """The fast read: the view's keys at its last refresh and now, LEFT JOIN its rows now (PRESENT);
    ``carry``: and each piece's changed rows, as the piece's number and the row's text in the
    columns :data:`CARRIED`, their keys and the view's columns NULL (the view's rows: the other way)."""
    names = key_names(2)
    keys_table = state_table(composition.keys)
    none = [exp.alias_(exp.cast(exp.Null(), exp.DataType.build("INT")), ident(CARRIED[0])),
            exp.alias_(exp.cast(exp.Null(), exp.DataType.build("TEXT")), ident(CARRIED[1]))] if carry else []
    affected: exp.Query = exp.union(
        exp.select(exp.alias_(col(ROW_KEY_COLUMN), ident(names[0])), exp.alias_(col(DUP), ident(names[1])), *none)
        .from_(keys_table),
        exp.select(exp.alias_(col(ROW_KEY_COLUMN), ident(names[0])), exp.alias_(col(DUP), ident(names[1])),
                   *[n.copy() for n in none])
        .from_(OUT_NEW))
    for i in range(1, len(changed) + 1) if carry else ():
        piece_rows = exp.select(exp.cast(exp.Null(), exp.DataType.build("TEXT")),
                                exp.cast(exp.Null(), exp.DataType.build("BIGINT")),
                                exp.Literal.number(i), _whole_row_text("c")).from_(
            exp.Table(this=ident(_names(i)[0]), alias=exp.TableAlias(this=ident("c"))))
        affected = exp.union(affected, piece_rows, distinct=False)
    rows = exp.select(exp.Star(), exp.alias_(exp.true(), ident(PRESENT))).from_(OUT_NEW)
    on = exp.and_(exp.EQ(this=col(ROW_KEY_COLUMN, "v"), expression=col(names[0], "k")),
                  exp.EQ(this=col(DUP, "v"), expression=col(names[1], "k")))
    query = (exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
             .from_(exp.Subquery(this=affected, alias=exp.TableAlias(this=ident("k"))))
             .join(exp.Subquery(this=rows, alias=exp.TableAlias(this=ident("v"))), on=on, join_type="left"))
    return sql_text(with_ctes(query, _new_rows_ctes(composition, changed)))


def update_sql(composition: Composition, changed: Sequence[str], keys: bool = True) -> list[str]:
    """The view's keys and each piece's rows at the refresh's end, each in one statement (its CTEs
    see the tables as they were): the keys first, computed from the pieces' rows before (``keys``
    False: left to :func:`kept_keys_sql`)."""
    keys_table = state_table(composition.keys)
    new_keys = exp.insert(exp.select(col(ROW_KEY_COLUMN), col(DUP)).from_(OUT_NEW), keys_table,
                          columns=[ROW_KEY_COLUMN, DUP])
    statements = [sql_text(with_ctes(new_keys, [*_new_rows_ctes(composition, changed), _emptied(keys_table)]))
                  ] if keys else []
    for i, (piece, read) in enumerate(zip(composition.pieces, changed), start=1):
        changed_i = _names(i)[0]
        table = state_table(piece.table)
        gone = exp.Delete(this=table.as_(ident("o")),
                          where=exp.Where(this=exp.Exists(this=exp.select(exp.Literal.number(1)).from_(changed_i)
                                                          .where(keys_match(piece.inner.key_columns, changed_i,
                                                                            "o")))))
        insert = exp.insert(exp.select(*[col(c) for c in piece.columns]).from_(changed_i).where(col(PRESENT)),
                            table, columns=[ident(c) for c in piece.columns])
        statements.append(sql_text(with_ctes(insert, [(changed_i, parsed(read)),
                                                      (HIDDEN_PREFIX + "gone", gone)])))
    return statements


KEPT_KEYS = (HIDDEN_PREFIX + "row_keys", HIDDEN_PREFIX + "dups")  # the arrays kept_keys_sql takes


def kept_keys_sql(composition: Composition) -> str:
    """:func:`update_sql`'s first statement given the view's keys after the refresh (two arrays,
    the keys' row texts and numbers, as the fast read returned them), not computed again."""
    keys_table = state_table(composition.keys)
    given = [exp.cast(exp.Placeholder(this=name), exp.DataType.build(kind, dialect=DIALECT))
             for name, kind in zip(KEPT_KEYS, ("TEXT[]", "BIGINT[]"), strict=True)]
    rows = exp.select(exp.Star()).from_(exp.Unnest(expressions=given))
    insert = exp.insert(rows, keys_table, columns=[ROW_KEY_COLUMN, DUP])
    return sql_text(with_ctes(insert, [_emptied(keys_table)]))


def _emptied(table: exp.Table) -> tuple[str, exp.Expr]:
    """A CTE that empties ``table`` before the statement's INSERT fills it (it sees the table as
    the statement found it)."""
    return HIDDEN_PREFIX + "gone", exp.Delete(this=table)


def rebuild_sql(composition: Composition, empty: bool = False, columns_of: ColumnsOf | None = None) -> list[str]:
    """After a complete refresh: each piece's rows, read whole, and the view's keys, computed over
    those rows as a fast refresh computes them (not from the base tables again; ``empty``:
    stand-ins). A table that has its columns now (``columns_of``) is emptied and refilled, as a
    refresh role may; one that has not is made again."""
    def refilled(name: str, rows: exp.Select, columns: Sequence[str]) -> list[str]:
        return refill_sql(name, rows.limit(0) if empty else rows, columns,
                          columns_of(qualified(name)) if columns_of else None)

    statements = []
    for piece in composition.pieces:
        rows = exp.select(exp.Star()).from_(exp.Subquery(
            this=parsed(piece.inner.select_sql), alias=exp.TableAlias(this=ident("i"))))
        statements += refilled(piece.table, rows, piece.columns)
        if not empty:  # the keys below join its rows: planned by guesses without statistics
            statements.append(analyze_sql(qualified(piece.table)))
    olds = [_names(i)[1] for i in range(1, len(composition.pieces) + 1)]
    keys = exp.select(col(ROW_KEY_COLUMN), col(DUP)).from_(
        exp.Subquery(this=_over(composition, olds), alias=exp.TableAlias(this=ident("v"))))
    with_ctes(keys, [(old, _rows_before(piece)) for old, piece in zip(olds, composition.pieces)])
    return [*statements, *refilled(composition.keys, keys, (ROW_KEY_COLUMN, DUP))]


class ComposedRows(Strategy):
    """A query over pieces kept by their own strategies (``pieces``), their rows as state."""

    def __init__(self, shape: ViewShape, pieces: Sequence[Strategy]):
        super().__init__(shape)
        assert shape.composed is not None
        self.composition: Composition = shape.composed
        self.pieces = list(pieces)
        # A refresh asks for the pieces' reads several times (the read, the null-safe read, the
        # state's update), each a large query: built once per window and null-key answers.
        self._reads_built: dict[tuple[datetime | None, tuple[bool, ...]], list[str]] = {}
        self._checks_built: dict[datetime | None, list[list[str | None]]] = {}

    @classmethod
    def build(cls, shape: ViewShape, strategy_of: StrategyOf) -> Strategy:
        assert shape.composed is not None
        return cls(shape, [strategy_of(piece.inner) for piece in shape.composed.pieces])

    @classmethod
    def state_names(cls, view: str) -> list[str]:
        # Its pieces' rows (inner$…_p<i>) and its keys; the pieces' own state is their strategies'.
        return [inner_name(view), outer_keys_name(view)]

    def how(self) -> str:
        kept = "; ".join(f"piece {i} ({p.shape.view_class.value}): {p.how()}" for i, p in enumerate(self.pieces, 1))
        return (f"its {len(self.pieces)} piece{'s' if len(self.pieces) > 1 else ''} are kept fast, each with its "
                f"rows in mvlog ({kept}); the query is recomputed from those rows, before and after, and the rows "
                f"that differ are written (keyed by their text)")

    def _piece_checks(self, since: datetime | None) -> list[list[str | None]]:
        if since not in self._checks_built:
            self._checks_built.clear()
            self._checks_built[since] = [piece.null_key_checks(since) for piece in self.pieces]
        return self._checks_built[since]

    def _per_piece(self, values: Sequence[bool], since: datetime | None) -> list[tuple[bool, ...]]:
        """``values`` (one per null-key check of every piece, in order) split per piece."""
        parts, at = [], 0
        for checks in self._piece_checks(since):
            parts.append(tuple(values[at:at + len(checks)]))
            at += len(checks)
        return parts

    def _reads(self, since: datetime | None, null_keys: Sequence[bool]) -> list[str]:
        key = (since, tuple(null_keys))
        if key not in self._reads_built:
            if any(built != since for built, _ in self._reads_built):
                self._reads_built.clear()  # one window at a time: a long-lived strategy keeps no history
            self._reads_built[key] = [piece.read_sql(since, part)
                                      for piece, part in zip(self.pieces, self._per_piece(null_keys, since))]
        return self._reads_built[key]

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        return [check for checks in self._piece_checks(since) for check in checks]

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = (), carry: bool = False) -> str:
        checks = self.null_key_checks(since)
        return read_sql(self.composition, self._reads(since, null_keys or (False,) * len(checks)), carry)

    def keymapped(self) -> list[ViewShape]:
        return [shape for piece in self.pieces for shape in piece.keymapped()]

    def probe_sql(self) -> list[str]:
        return [probe for piece in self.pieces for probe in piece.probe_sql()]

    def scratch(self, since: datetime | None) -> list[Scratch]:
        # Each piece's read, once: the view's keys, its rows' update and a top-N margin over the
        # view each read it (a piece's read is as dear as the refresh's read of it).
        return [scratch_sql(i, read) for i, read in enumerate(self._reads(since, self.null_safe(since)), start=1)]

    def carrying_read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str | None:
        return self.read_sql(since, null_keys, carry=True)

    def record_takes_read(self) -> bool:
        return True

    def recorded_read_sql(self, since: datetime | None) -> str:
        return read_sql(self.composition, scratch_reads(self.composition))

    def state_update(self, since: datetime | None, keys: bool = True) -> list[str]:
        # The pieces' rows are updated from their reads (filled before, by scratch), which read
        # their state as of the last refresh: first.
        return [*update_sql(self.composition, scratch_reads(self.composition), keys),
                *(s for piece in self.pieces for s in piece.state_update(since))]

    def kept_keys(self, since: datetime | None) -> KeptKeys:
        # The read's present rows are the query's rows now, keyed: the keys to keep, without
        # running the pieces' reads and the query again (as long as the read itself, at scale).
        return KeptKeys(kept_keys_sql(self.composition), KEPT_KEYS, tuple(key_names(2)),
                        self.state_update(since, keys=False))

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        return [*(s for piece in self.pieces for s in piece.state_rebuild(columns_of)),
                *rebuild_sql(self.composition, columns_of=columns_of)]

    def stand_in_sql(self) -> list[str]:
        return [*(s for piece in self.pieces for s in piece.stand_in_sql()),
                *rebuild_sql(self.composition, empty=True)]

    def statements(self, since: datetime) -> list[str]:
        return self._read_then_record(since)

    def any_dml_note(self) -> str:
        return "; ".join(note for piece in self.pieces if (note := piece.any_dml_note()))
