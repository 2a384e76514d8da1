"""Ansible's size filters: ``human_readable`` (bytes or bits to ``1.00 KB``) and ``human_to_bytes`` (``10 MB``,
``1 Gb`` with ``isbits``, a bare number in ``default_unit``), with ansible-core 2.19's refusals of a unit it
cannot read (``human_to_bytes: cannot convert ...``)."""

from __future__ import annotations

import re
from typing import Any

from ..errors import TemplateError

_SIZES = {"Y": 1 << 80, "Z": 1 << 70, "E": 1 << 60, "P": 1 << 50, "T": 1 << 40, "G": 1 << 30, "M": 1 << 20,
          "K": 1 << 10, "B": 1}  # fmt: skip
_UNIT_NAMES = {"B": "byte", "K": "kilo", "M": "mega", "G": "giga", "T": "tera", "P": "peta", "E": "exa",
               "Z": "zeta", "Y": "yotta"}  # fmt: skip


def human_readable(size: Any, isbits: bool = False, unit: str | None = None) -> str:
    size = float(size)
    suffix, limit = "B", 1
    for suffix, limit in _SIZES.items():  # largest first
        if (unit is None and size >= limit) or (unit is not None and unit.upper()[:1] == suffix):
            break
    base = "bits" if isbits else "Bytes"
    label = suffix + base[0] if limit != 1 else base
    return f"{size / limit:.2f} {label}"


def human_to_bytes(value: Any, default_unit: str | None = None, isbits: bool = False) -> int:
    m = re.search(r"^([0-9]*\.?[0-9]+)(?:\s*([A-Za-z]+))?\s*$", str(value))
    if m is None:
        raise TemplateError(f"human_to_bytes: cannot interpret {value!r}")
    number, unit = float(m.group(1)), m.group(2) or default_unit
    if unit is None:
        return round(number)
    key = unit[0].upper()
    if key not in _SIZES:
        raise TemplateError(f"human_to_bytes: cannot convert {value!r}: the suffix must be one of {', '.join(_SIZES)}")
    if len(unit) > 1:
        word = "bit" if isbits else "byte"
        short = (key if key != "B" else "") + ("b" if isbits else "B")
        long = word if key == "B" else f"{_UNIT_NAMES[key]}{word}"
        if unit.lower() != long and unit != short:
            raise TemplateError(f"human_to_bytes: cannot convert {value!r}: expect {short} or {key}")
    return round(number * _SIZES[key])
