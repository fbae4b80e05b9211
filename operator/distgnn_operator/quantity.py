"""Kubernetes resource quantities in the API server's canonical form.

The API server stores ``cpu: "0.5"`` as ``500m`` and ``memory: 2048Mi`` as ``2Gi``, so a drift
check comparing strings would see a change on every pass. :func:`canonical` reproduces
``k8s.io/apimachinery/pkg/api/resource.Quantity.String()`` after ``ParseQuantity``:

* the value is exact (no floats); a non-zero magnitude is rounded *up* to a multiple of 1n;
* the suffix kind is kept (binary ``Ki``..``Ei``, decimal SI ``n``..``E``, or ``eN``), except
  that a binary quantity below 1024 in magnitude, or not a whole number, is written in
  decimal SI (``0.5Ki`` -> ``512``, ``0.9Gi`` -> ``966367641600m``);
* decimal forms use the largest exponent that is a multiple of 3 and leaves an integer
  mantissa (``1000`` -> ``1k``, ``0.1`` -> ``100m``, ``1.2e3`` -> ``1200``); binary forms
  the largest power of 1024 (``1536Mi`` stays, ``2048Mi`` -> ``2Gi``);
* binary quantities saturate at 2^63-1; zero is ``0``.
"""

from __future__ import annotations

import re
from fractions import Fraction

_DEC = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_SUFFIX = {v: k for k, v in _DEC.items()}
_BIN = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_BIN_SUFFIX = {v: k for k, v in _BIN.items()}
_RE = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(.*)")
_EXP = re.compile(r"[eE]([+-]?\d+)")
_MAX = 2**63 - 1
_NANO = 10**9


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse(text: str) -> tuple[Fraction, str]:
    """(exact value, format) with format ``BinarySI``, ``DecimalSI`` or ``DecimalExponent``."""
    m = _RE.fullmatch(text)
    if m is None or (not m.group(2) and m.group(3) is None):
        raise QuantityError(f"not a quantity: {text!r}")
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    digits = Fraction(int(whole or "0")) + (
        Fraction(int(frac), 10 ** len(frac)) if frac else Fraction(0)
    )
    if suffix in _BIN:
        fmt, value = "BinarySI", digits * 1024 ** _BIN[suffix]
    elif suffix in _DEC:
        fmt, value = "DecimalSI", digits * Fraction(10) ** _DEC[suffix]
    elif (e := _EXP.fullmatch(suffix)) is not None:
        fmt, value = "DecimalExponent", digits * Fraction(10) ** int(e.group(1))
    else:
        raise QuantityError(f"not a quantity: {text!r} (unknown suffix {suffix!r})")
    if value:  # round the magnitude up to a whole number of nano units
        n = value * _NANO
        value = Fraction(-(-n.numerator // n.denominator), _NANO)
    if fmt == "BinarySI" and value > _MAX:
        value = Fraction(_MAX)
    if fmt == "BinarySI" and 0 < value < 1:
        fmt = "DecimalSI"
    return (-value if sign == "-" else value), fmt


def canonical(text: str) -> str:
    """The string the API server stores for quantity ``text`` (raises QuantityError)."""
    value, fmt = parse(text)
    if value == 0:
        return "0"
    sign, mag = ("-" if value < 0 else ""), abs(value)
    if fmt == "BinarySI" and (mag < 1024 or mag.denominator != 1):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        amount, power = mag.numerator, 0
        while amount % 1024 == 0 and power < 6:
            amount //= 1024
            power += 1
        return f"{sign}{amount}{_BIN_SUFFIX.get(power, '')}"
    amount, exp = int(mag * _NANO), -9
    while amount % 10 == 0:
        amount //= 10
        exp += 1
    while exp % 3:
        amount *= 10
        exp -= 1
    if fmt == "DecimalExponent" or exp not in _DEC_SUFFIX:
        return f"{sign}{amount}{f'e{exp}' if exp else ''}"
    return f"{sign}{amount}{_DEC_SUFFIX[exp]}"


def canonical_or_same(v: object) -> object:
    """``canonical(v)`` for a string that parses as a quantity (ints too); else ``v``."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        v = str(v)
    if not isinstance(v, str):
        return v
    try:
        return canonical(v)
    except QuantityError:
        return v
