"""The real ``hl-smi``'s output: parsing its CSV (plus the formatter the emulator's fake
tool, ``hpu_emulator.fake_hlsmi``, prints with). Running the tool is
``hpu_plugin.machine.query``: ``gaudi/`` stays pure.

The format follows the real tool (Habana "Multiple Dockers" page):
``hl-smi -Q index,module_id -f csv`` prints a header line ``index, module_id`` and one row per
device, fields separated by a comma and a space, rows in no particular order.
``-f csv,noheader`` drops the header. Whether quantities such as ``memory.total`` carry a
unit in the header (``memory.total [MiB]``) or the value (``98304 MiB``) is not in our
sources, so the parser accepts both and the formatter prints the value with its unit.

Keeping the formatter here, next to the parser, is what makes the emulator's ``hl-smi``
print what this parser reads, and both what the real tool prints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

INDEX_MODULE_FIELDS = ("index", "module_id")
#: What ``hpu-plugin devices`` asks for; the emulator should answer every one of these.
DEVICE_FIELDS = ("index", "module_id", "name", "memory.total", "bus_id")

_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]$")
_INTEGER = re.compile(r"[0-9]+", re.ASCII)
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*", re.ASCII)
_QUANTITY = re.compile(r"([0-9]+)\s*([A-Za-z]*)", re.ASCII)
_MIB = {"": 1, "mib": 1, "mb": 1, "gib": 1024, "gb": 1024, "kib": 1 / 1024, "kb": 1 / 1024}


class HlSmiError(ValueError):
    """``hl-smi`` printed something we cannot read, failed, or did not answer in time."""


def format_csv(
    rows: Iterable[Mapping[str, object]], fields: Sequence[str], header: bool = True
) -> str:
    """Print ``rows`` as ``hl-smi -Q <fields> -f csv`` does (``header=False``: ``csv,noheader``)."""
    lines = [", ".join(fields)] if header else []
    for row in rows:
        lines.append(", ".join(str(row[field]) for field in fields))
    return "\n".join(lines) + "\n"


#: ``hl-smi -v`` prints one line naming the software release and the firmware, in the form
#: lightning-habana's parser documents (``resources._parse_hpu_synapse_versions``):
#: ``Habanalabs hl-smi/hlml version hl-1.11.0-fw-45.1.1.1 (Aug 04 2023 - 02:48:21)``.
_VERSION_LINE = re.compile(r"version hl-([0-9][0-9.]*)-fw-([0-9][0-9.]*)", re.ASCII)


def format_version(software: str, firmware: str, built: str) -> str:
    """What ``hl-smi -v`` prints for a software release, firmware version and build date."""
    return f"Habanalabs hl-smi/hlml version hl-{software}-fw-{firmware} ({built})\n"


def parse_version(text: str) -> tuple[str, str]:
    """(software release, firmware) from ``hl-smi -v`` output; :class:`HlSmiError` if the
    text does not hold both (a tool reading it would otherwise take version 0.0.0)."""
    match = _VERSION_LINE.search(text)
    if match is None:
        raise HlSmiError(f"hl-smi -v printed no 'version hl-<release>-fw-<firmware>': {text!r}")
    return match.group(1).rstrip("."), match.group(2).rstrip(".")


def _field_name(text: str) -> str:
    return _UNIT_SUFFIX.sub("", text.strip())


def parse_csv(text: str, fields: Sequence[str] | None = None) -> list[dict[str, str]]:
    """Rows of ``hl-smi -f csv`` output as dicts keyed by field name (units dropped).

    With ``fields``, a first line of field names is taken as the header and a headerless
    output (``csv,noheader``: its first line has values) is read with ``fields`` as columns. Without
    ``fields`` the first line must be the header. Raises :class:`HlSmiError` for text with
    no header, an empty field name, or a row whose column count differs from the header's.
    """
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise HlSmiError("hl-smi printed nothing")
    first = [_field_name(cell) for cell in lines[0].split(",")]
    looks_like_header = any(first) and all(_FIELD.fullmatch(name) for name in first if name)
    if fields is not None and first != list(fields) and not looks_like_header:
        columns, body = list(fields), lines
    else:
        columns, body = first, lines[1:]
    if any(not name for name in columns):
        raise HlSmiError(f"hl-smi header has an empty field name: {lines[0]!r}")
    if len(set(columns)) != len(columns):
        raise HlSmiError(f"hl-smi header repeats a field: {lines[0]!r}")
    rows = []
    for number, line in enumerate(body, start=1):
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(columns):
            raise HlSmiError(
                f"hl-smi row {number} has {len(cells)} fields, the header {len(columns)}: {line!r}"
            )
        rows.append(dict(zip(columns, cells, strict=True)))
    return rows


def parse_int(value: str, field: str) -> int:
    """A non-negative integer cell; :class:`HlSmiError` otherwise."""
    text = value.strip()  # str.strip takes control separators int() refuses, e.g. "\x1f"
    if not _INTEGER.fullmatch(text):
        raise HlSmiError(f"hl-smi field {field} is not a non-negative integer: {value!r}")
    return int(text)


def parse_mib(value: str) -> int | None:
    """A memory quantity in MiB (``98304``, ``98304 MiB``, ``96 GiB``); ``None`` for N/A."""
    match = _QUANTITY.fullmatch(value.strip())
    if match is None or match.group(2).lower() not in _MIB:
        return None
    return int(int(match.group(1)) * _MIB[match.group(2).lower()])


def parse_index_module_map(text: str) -> dict[int, int]:
    """Device index to module id from ``hl-smi -Q index,module_id -f csv`` (header optional).

    Raises :class:`HlSmiError` when a column is missing, a cell is not an integer, or an
    index or module id appears twice.
    """
    return rows_to_index_module_map(parse_csv(text, INDEX_MODULE_FIELDS))


def rows_to_index_module_map(rows: Iterable[Mapping[str, str]]) -> dict[int, int]:
    """The index to module id map of parsed rows; see :func:`parse_index_module_map`."""
    mapping: dict[int, int] = {}
    for row in rows:
        if "index" not in row or "module_id" not in row:
            raise HlSmiError(f"hl-smi output lacks index or module_id columns: {sorted(row)}")
        index = parse_int(row["index"], "index")
        module = parse_int(row["module_id"], "module_id")
        if index in mapping:
            raise HlSmiError(f"hl-smi lists device index {index} twice")
        if module in mapping.values():
            raise HlSmiError(f"hl-smi lists module id {module} twice")
        mapping[index] = module
    return mapping
