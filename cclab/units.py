"""Units: parse the numbers people write in experiment and profile files.

Every value is checked here, and a bad one raises SpecError naming the field.

  rates     "10mbit", "50 Mbit/s", "500kbit", "1Gbit" or a number of bit/s;
            "50MB/s" is megaBYTES per second (400 Mbit/s)
  times     "50ms", "1.5s", "800us", "2min" or a number of seconds
  sizes     "1500" (bytes), "64MiB", "10MB", "32kbit" (tc style, bits)
  percents  2, 0.5, "2%"

Units are case-sensitive: B is a byte and b (or bit) a bit, so "MB/s" is megabytes per second
while "Mbit/s", "Mb/s" and tc's "mbit" are megabits.  Rates are bits per second (SI prefixes,
as tc uses them).  "Mbps" and "mb/s" are refused: tc reads "mbps" as megabytes per second while
people usually mean megabits.
"""

from __future__ import annotations

import math
import re


class SpecError(ValueError):
    """A bad value in an experiment or a profile.  str() is a one-line message:
    "FILE: FIELD: MESSAGE" (the file when known, the field when there is one)."""

    def __init__(self, field: str, message: str, file: str = ""):
        message = " ".join(str(message).split())          # always one line
        text = f"{field}: {message}" if field else message
        super().__init__(f"{file}: {text}" if file else text)
        self.field = field
        self.message = message
        self.file = file

    def in_file(self, file) -> "SpecError":
        """The same error naming the file it is in (unless it already names one)."""
        return self if self.file else SpecError(self.field, self.message, str(file))

    def under(self, prefix: str) -> "SpecError":
        """The same error with its field placed under `prefix` (e.g. "flow[2]")."""
        if not prefix:
            return self
        field = f"{prefix}.{self.field}" if self.field else prefix
        if self.field.startswith("["):
            field = prefix + self.field
        return SpecError(field, self.message, self.file)


_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"

# Case-sensitive: B is a byte, b and bit a bit.  tc's own spellings (mbit, kbit) are kept.
_RATE_UNITS = {
    "bit": 1, "bit/s": 1, "b/s": 1,
    "kbit": 1e3, "Kbit": 1e3, "kbit/s": 1e3, "Kbit/s": 1e3, "kb/s": 1e3, "Kb/s": 1e3,
    "mbit": 1e6, "Mbit": 1e6, "mbit/s": 1e6, "Mbit/s": 1e6, "Mb/s": 1e6,
    "gbit": 1e9, "Gbit": 1e9, "gbit/s": 1e9, "Gbit/s": 1e9, "Gb/s": 1e9,
    "B/s": 8, "kB/s": 8e3, "KB/s": 8e3, "MB/s": 8e6, "GB/s": 8e9,
}
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0,
               "min": 60.0, "h": 3600.0}
_SIZE_UNITS = {
    "": 1, "b": 1, "B": 1, "byte": 1, "bytes": 1,                  # tc writes bytes as "b"
    "kB": 1000, "KB": 1000, "MB": 1000**2, "GB": 1000**3,
    "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3,
    "K": 1024, "M": 1024**2, "G": 1024**3,                         # iperf3 -n style
    "bit": 1 / 8, "kbit": 1000 / 8, "Kbit": 1000 / 8, "mbit": 1000**2 / 8, "Mbit": 1000**2 / 8,
    "gbit": 1000**3 / 8, "Gbit": 1000**3 / 8,
}

# What each kind of value may be written as (JSON Schema patterns for editors, see schema.py).
NUMBER_PATTERN = r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?"


def unit_pattern(units: dict) -> str:
    """A regular expression for a number followed by one of `units`."""
    alts = "|".join(re.escape(u) for u in sorted(units, key=len, reverse=True) if u)
    return rf"^\s*{NUMBER_PATTERN}\s*({alts}){'?' if '' in units else ''}\s*$"


def _number(value, field: str, units: dict, kind: str, default_unit: float) -> float:
    if isinstance(value, bool):
        raise SpecError(field, f"expected a {kind}, got {value!r}")
    if isinstance(value, (int, float)):
        x = float(value) * default_unit
    elif isinstance(value, str):
        m = re.fullmatch(_NUM + r"\s*([A-Za-zµ/]*)", value.strip())
        if not m:
            raise SpecError(field, f"expected a {kind}, got {value!r}")
        unit = m.group(2)
        if unit == "" and default_unit is not None:
            factor = default_unit
        elif unit in units:
            factor = units[unit]
        else:
            known = ", ".join(u for u in units if u)
            raise SpecError(field, f"unknown unit {m.group(2)!r} in {value!r} (units are "
                            f"case-sensitive; use one of: {known})")
        x = float(m.group(1)) * factor
    else:
        raise SpecError(field, f"expected a {kind}, got {value!r}")
    if not math.isfinite(x):
        raise SpecError(field, f"expected a finite {kind}, got {value!r}")
    return x


def _at_most(x: float, maximum, field: str, value, show) -> None:
    if maximum is not None and x > maximum:
        raise SpecError(field, f"must be at most {show(maximum)}, got {value!r}")


def rate(value, field: str, *, allow_zero: bool = False, maximum: float | None = None) -> float:
    """A rate in bit/s; must be positive (zero only with allow_zero)."""
    x = _number(value, field, _RATE_UNITS, "rate such as '10mbit'", 1.0)
    if x < 0 or (x == 0 and not allow_zero):
        raise SpecError(field, f"rate must be greater than zero, got {value!r}")
    _at_most(x, maximum, field, value, lambda m: f"{tc_rate(m)} ({m:g} bit/s)")
    return x


def duration(value, field: str, *, positive: bool = False, minimum: float = 0.0,
             maximum: float | None = None) -> float:
    """A time in seconds, never negative (positive=True also refuses zero)."""
    x = _number(value, field, _TIME_UNITS, "time such as '50ms'", 1.0)
    if x < 0:
        raise SpecError(field, f"must not be negative, got {value!r}")
    if positive and x == 0:
        raise SpecError(field, f"must be greater than zero, got {value!r}")
    if x < minimum:
        raise SpecError(field, f"must be at least {minimum:g} s, got {value!r}")
    _at_most(x, maximum, field, value, lambda m: f"{m:g} s")
    return x


def size(value, field: str, *, positive: bool = True, minimum: int = 0,
         maximum: float | None = None) -> int:
    """A size in bytes."""
    x = _number(value, field, _SIZE_UNITS, "size such as '10MB'", 1.0)
    if x < 0 or (positive and x == 0):
        raise SpecError(field, f"size must be greater than zero, got {value!r}")
    if x < minimum:
        raise SpecError(field, f"must be at least {minimum} bytes, got {value!r}")
    _at_most(x, maximum, field, value, lambda m: f"{m:,.0f} bytes")
    return int(round(x))


def percent(value, field: str) -> float:
    """A percentage between 0 and 100."""
    if isinstance(value, str) and value.strip().endswith("%"):
        value = value.strip()[:-1]
    x = _number(value, field, {}, "percentage between 0 and 100", 1.0)
    if not 0 <= x <= 100:
        raise SpecError(field, f"must be between 0 and 100 %, got {value!r}")
    return x


def integer(value, field: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SpecError(field, f"expected a whole number, got {value!r}")
    if value < minimum:
        raise SpecError(field, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(field, f"must be at most {maximum}, got {value}")
    return value


def number(value, field: str, *, minimum: float | None = None) -> float:
    x = _number(value, field, {}, "number", 1.0)
    if minimum is not None and x < minimum:
        raise SpecError(field, f"must be at least {minimum}, got {value!r}")
    return x


def boolean(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, f"expected true or false, got {value!r}")
    return value


def text(value, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(field, f"expected a non-empty string, got {value!r}")
    return value


# ---------------------------------------------------------------- formatting for tc

def tc_rate(bps: float) -> str:
    """A rate as tc writes it: '10mbit', '1500kbit', '123bit'."""
    b = int(round(bps))
    for unit, f in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if b % f == 0:
            return f"{b // f}{unit}"
    return f"{b}bit"


def tc_time(seconds: float) -> str:
    """A time as tc writes it: '50ms', '800us'."""
    us = int(round(seconds * 1e6))
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def tc_size(nbytes: int) -> str:
    """A size in bytes as tc writes it; bit multiples print as kbit (32kbit = 4000 bytes)."""
    bits = int(nbytes) * 8
    if bits % 1000 == 0 and bits >= 8000:
        return f"{bits // 1000}kbit"
    return f"{int(nbytes)}b"


def tc_percent(p: float) -> str:
    return f"{p:g}%"
