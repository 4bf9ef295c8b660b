"""Reading input facts: ``<relation>.facts`` (tab-separated, no header; Soufflé) or
``<relation>.csv`` (comma-separated with a header row of attribute names), UTF-8 text.

Any of them may be gzip-compressed, as Soufflé reads them: ``edge.facts.gz`` is found
like ``edge.facts``, and a file whose content is gzip is decompressed whatever its name
(the gzip magic bytes decide, not the suffix).

Errors are one line, ``file:line: what is wrong``, raised as ``FactsError``; the CLI
prints them and exits 1.
"""

from __future__ import annotations

import csv
import gzip
import logging
import math
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from fixflow.checker.ast import Attribute
from fixflow.pipeline.kafka.messages import is_one_symbol
from fixflow.pipeline.lake.delta import (
    arrow_schema,
    arrow_type,
    declared_rows,
    nullary_table,
    rows_to_arrow,
)

log = logging.getLogger(__name__)

Value = int | float | str
UNSIGNED_MAX = 2**63 - 1
"""The largest ``unsigned`` value: ``unsigned`` columns are int64 like ``number``."""

SUFFIXES = (".facts", ".csv", ".facts.gz", ".csv.gz")
"""The facts file names of a relation, in order of preference."""
GZIP_MAGIC = b"\x1f\x8b"


class FactsError(Exception):
    """A missing or malformed facts file; the message is ``file:line: ...``."""


def input_path(directory: Path, relation: str) -> Path:
    """The facts file of ``relation`` in ``directory`` (first of ``SUFFIXES`` present)."""
    for suffix in SUFFIXES:
        path = directory / f"{relation}{suffix}"
        if path.is_file():
            return path
    raise FactsError(
        f"{directory}: no input file for relation `{relation}` "
        f"(expected {relation}.facts or {relation}.csv, optionally gzip-compressed .gz)"
    )


def is_csv(path: Path) -> bool:
    return path.name.endswith((".csv", ".csv.gz"))


def _convert(text: str, attribute: Attribute, where: str) -> Value:
    if attribute.type == "symbol":
        return text
    try:
        value = int(text.strip()) if attribute.type == "number" else float(text.strip())
    except ValueError:
        raise FactsError(
            f"{where}: column `{attribute.name}` expects a {attribute.type}, found {text!r}"
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        # The stream dead-letters it and `publish` refuses it: one rule for every input.
        raise FactsError(
            f"{where}: column `{attribute.name}` expects a finite float, found {text!r}"
        )
    if attribute.declared == "unsigned" and not 0 <= value <= UNSIGNED_MAX:
        # `unsigned` is stored as int64: only the values both types hold are accepted.
        raise FactsError(
            f"{where}: column `{attribute.name}` is unsigned (0 to {UNSIGNED_MAX}), found {text!r}"
        )
    return value


def _lines(path: Path) -> Iterator[str]:
    """The file's lines as text, line endings kept: gzip content decompressed, UTF-8
    decoded (a byte-order mark dropped). Anything else is a one-line ``FactsError``."""
    number, compressed = 0, False
    try:
        with path.open("rb") as raw:
            compressed = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
            stream: Iterable[bytes] = gzip.GzipFile(fileobj=raw) if compressed else raw
            for number, data in enumerate(stream, start=1):
                yield _decoded(path, number, data)
    except (OSError, EOFError, zlib.error) as exc:
        what = "not a readable gzip file" if compressed else "cannot read"
        where = f"{path}:{number + 1}" if number else str(path)
        raise FactsError(f"{where}: {what} ({exc})") from None


def _decoded(path: Path, number: int, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise FactsError(
            f"{path}:{number}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column "
            f"{exc.start + 1}); facts files are UTF-8 text (.facts tab-separated or .csv), "
            "optionally gzip-compressed"
        ) from None


def _records(
    path: Path, delimiter: str | None = None, one_symbol: bool = False
) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-empty record; with a ``delimiter`` (Soufflé's
    ``IO=file`` input) every line is split at it, whatever the file's name. With
    ``one_symbol`` (a relation of one ``symbol`` column) a blank line is the symbol "", as
    Soufflé reads it."""
    if delimiter is None and is_csv(path):
        reader = csv.reader(_lines(path))
        try:
            for fields in reader:
                if fields and any(f.strip() for f in fields):
                    yield reader.line_num, fields
        except csv.Error as error:  # e.g. a bare carriage return inside a line
            raise FactsError(f"{path}:{reader.line_num + 1}: not CSV ({error})") from None
        return
    separator = "\t" if delimiter is None else delimiter
    for number, line in enumerate(_lines(path), start=1):
        line = line.rstrip("\r\n")
        if line.strip() or one_symbol:
            yield number, line.split(separator)


def read_rows(
    path: Path, attributes: Sequence[Attribute], delimiter: str | None = None
) -> list[tuple[Value, ...]]:
    """Typed rows of one facts file, in declared column order (``delimiter``: see
    ``_records``; such a file has no header)."""
    if not attributes:
        return [()] if _nullary_holds(path, delimiter) else []
    records = _records(path, delimiter, one_symbol=is_one_symbol(attributes))
    order = list(range(len(attributes)))
    if delimiter is None and is_csv(path):
        header = next(records, None)
        if header is None:
            return []
        order = _header_order(path, header, attributes)
    rows = []
    for number, fields in records:
        where = f"{path}:{number}"
        if len(fields) != len(attributes):
            raise FactsError(f"{where}: expected {len(attributes)} fields, found {len(fields)}")
        rows.append(
            tuple(_convert(fields[i], a, where) for i, a in zip(order, attributes, strict=True))
        )
    return rows


def _nullary_holds(path: Path, delimiter: str | None) -> bool:
    """Whether a nullary relation's facts file holds its empty tuple. As Soufflé's reader,
    which reads no field of a line when the arity is 0, any line does: Soufflé writes
    ``()``, ``fixflow eval --csv`` an empty line (after the header line of a ``.csv``)."""
    lines = _lines(path)
    if delimiter is None and is_csv(path):
        next(lines, None)  # the header: an empty line
    return next(lines, None) is not None


def _header_order(
    path: Path, header: tuple[int, list[str]], attributes: Sequence[Attribute]
) -> list[int]:
    """Positions of the declared attributes in a CSV header (which names them all)."""
    number, names = header
    names = [n.strip() for n in names]
    declared = [a.name for a in attributes]
    if sorted(names) != sorted(declared):
        raise FactsError(
            f"{path}:{number}: header {','.join(names)} does not name the declared "
            f"attributes {','.join(declared)}"
        )
    return [names.index(name) for name in declared]


def read_table(
    path: Path, attributes: Sequence[Attribute], delimiter: str | None = None
) -> pa.Table:
    """One facts file as a pyarrow table with the declared schema: through Arrow's CSV
    parser (``arrow_table``) when it reads the file exactly as ``read_rows`` would, else
    through ``read_rows`` (which also names the line of a malformed file)."""
    table = arrow_table(path, attributes, delimiter)
    if table is not None:
        log.info("read %d facts from %s (Arrow)", table.num_rows, path)
        return table
    rows = read_rows(path, attributes, delimiter)
    log.info("read %d facts from %s", len(rows), path)
    if not attributes:  # no columns: the row count alone says whether it holds
        return declared_rows(nullary_table(bool(rows)), attributes)
    return rows_to_arrow(rows, attributes)


BOM = b"\xef\xbb\xbf"


def arrow_table(
    path: Path, attributes: Sequence[Attribute], delimiter: str | None = None
) -> pa.Table | None:
    """A facts file parsed by Arrow's CSV reader (multi-threaded C++; 1M edges in ~0.1 s
    against ~3.7 s for ``read_rows``, which converts field by field in Python). None
    whenever the result could differ from ``read_rows``'s or the file is malformed: then
    ``read_rows`` reads it and, for a malformed file, names the line.

    Arrow is strict where Python's ``int``/``float`` are lenient (spaces, ``+``, ``_``), so
    what it accepts the row reader reads the same. Left to the row reader: a bare ``\r``
    (Arrow ends a line there), a ``.csv`` with quotes (Python's ``csv`` and Arrow differ on
    malformed quoting), a relation of one symbol (a blank line is a fact), a line of blank
    fields in an all-symbol relation (the row reader skips it), a multi-character
    delimiter, non-finite floats and unsigned values out of range."""
    if not attributes or is_one_symbol(attributes):
        return None
    data = _content(path)
    if data is None:
        return None
    csv_file = delimiter is None and is_csv(path)
    separator = "," if csv_file else delimiter or "\t"
    return parse_lines(data, attributes, separator, csv_file)


def parse_lines(
    data: bytes,
    attributes: Sequence[Attribute],
    separator: str,
    csv_file: bool,
    names: Sequence[str] | None = None,
) -> pa.Table | None:
    """Whole lines of a facts file (the file, or a range of it as a Spark task reads it:
    ``lake.task_facts``) parsed by Arrow with ``arrow_table``'s rules; None when the row
    reader must decide. A ``.csv`` file's lines start with its header unless ``names``
    gives the header's fields (a range past the first line)."""
    # Counted, not replaced: a copy of a 1.8 GB file would double the reader's peak.
    bare_return = data.count(b"\r") != data.count(b"\r\n")
    if bare_return or (csv_file and b'"' in data) or len(separator) != 1:
        return None
    if not data.strip():  # no line (a range of blank lines): Arrow wants a header
        return arrow_schema(attributes).empty_table()
    parsed = _arrow_csv(data, attributes, separator, header=csv_file and names is None, names=names)
    if parsed is None:
        return None
    columns = _declared_columns(parsed, attributes)
    if columns is None or not all(
        _in_domain(c, a) for c, a in zip(columns, attributes, strict=True)
    ):
        return None
    # One chunk a column: the driver's kernels then read the columns without a copy.
    table = pa.table(columns, schema=arrow_schema(attributes)).combine_chunks()
    return None if _has_blank_symbol_rows(table, attributes) else table


def _content(path: Path) -> bytes | None:
    """The file's bytes, gzip decompressed and a byte-order mark dropped; None when it
    cannot be read so (the row reader then says why, with the line)."""
    try:
        data = path.read_bytes()
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return None
    return data[len(BOM) :] if data.startswith(BOM) else data


def _arrow_csv(
    data: bytes,
    attributes: Sequence[Attribute],
    separator: str,
    header: bool,
    names: Sequence[str] | None = None,
) -> pa.Table | None:
    """``data`` parsed with every column typed as declared (by header name in a ``.csv``,
    whose header is ``data``'s first line or ``names``; by position otherwise); None when
    Arrow refuses it."""
    types = {f"c{i}": arrow_type(a.type) for i, a in enumerate(attributes)}
    if header or names is not None:
        types = {a.name: arrow_type(a.type) for a in attributes}
    column_names = list(names) if names is not None else None if header else list(types)
    try:
        return pa_csv.read_csv(
            pa.BufferReader(data),
            read_options=pa_csv.ReadOptions(column_names=column_names),
            parse_options=pa_csv.ParseOptions(
                delimiter=separator, quote_char=False, escape_char=False, ignore_empty_lines=True
            ),
            convert_options=pa_csv.ConvertOptions(column_types=types, null_values=[]),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # malformed or lenient syntax: the row reader decides, line by line


def _declared_columns(
    parsed: pa.Table, attributes: Sequence[Attribute]
) -> list[pa.ChunkedArray] | None:
    """The parsed columns in declared order; None when a header names other columns (or
    names one twice, or pads a name with spaces): the row reader's error or reading."""
    names = parsed.column_names
    declared = [f"c{i}" for i in range(len(attributes))]
    if names != declared:
        declared = [a.name for a in attributes]
        if sorted(names) != sorted(declared):
            return None
    return [parsed.column(name) for name in declared]


def _has_blank_symbol_rows(table: pa.Table, attributes: Sequence[Attribute]) -> bool:
    """Whether some row of an all-symbol relation has only blank fields: the row reader
    skips such a line (a relation with a number column refuses it in Arrow already)."""
    if any(a.type != "symbol" for a in attributes):
        return False
    blank = [pc.equal(pc.utf8_trim_whitespace(c), "") for c in table.columns]
    every = blank[0]
    for column in blank[1:]:
        every = pc.and_(every, column)
    return bool(pc.any(every).as_py())


def _in_domain(column: pa.ChunkedArray, attribute: Attribute) -> bool:
    """Finite floats, non-negative unsigned values (an empty column's ``all`` is null)."""
    if attribute.type == "float":
        return pc.all(pc.is_finite(column)).as_py() is not False
    if attribute.declared == "unsigned":
        return pc.all(pc.greater_equal(column, 0)).as_py() is not False
    return True


def load_inputs(
    directory: Path,
    relations: dict[str, tuple[Attribute, ...]],
    options: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> dict[str, pa.Table]:
    """Every input relation's facts from ``directory``; a missing file is an error.
    ``options`` are the options of each of a relation's ``.input`` directives (see
    ``input_file``); as in Soufflé, a relation with several holds the union of their files."""
    tables = {}
    for relation, files in input_files(directory, list(relations), options).items():
        attributes = relations[relation]
        read = [read_table(path, attributes, delimiter) for path, delimiter in files]
        tables[relation] = read[0] if len(read) == 1 else _union(read)
    return tables


def input_files(
    directory: Path,
    relations: Sequence[str],
    options: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> dict[str, list[tuple[Path, str | None]]]:
    """Each relation's facts files and their delimiters (``input_file``); a missing
    directory or file is a ``FactsError``."""
    if relations and not directory.is_dir():  # a program without inputs needs no facts
        raise FactsError(f"{directory}: facts directory does not exist")
    return {
        relation: [input_file(directory, relation, o) for o in (options or {}).get(relation, [{}])]
        for relation in relations
    }


def _union(tables: Sequence[pa.Table]) -> pa.Table:
    """The distinct rows of several tables of one schema."""
    whole = pa.concat_tables(tables)
    return whole.group_by(whole.column_names, use_threads=False).aggregate([])


def input_file(
    directory: Path, relation: str, options: Mapping[str, str]
) -> tuple[Path, str | None]:
    """The facts file of ``relation`` and the delimiter to split it at (None: by its
    suffix). With ``.input`` options it is Soufflé's ``IO=file``: ``filename`` relative to
    ``directory`` (default ``<relation>.facts``), ``delimiter`` (default tab), no header."""
    if not options:
        return input_path(directory, relation), None
    path = directory / options.get("filename", f"{relation}.facts")
    if not path.is_file():
        raise FactsError(f"{path}: no input file for relation `{relation}`")
    return path, options.get("delimiter", "\t")
