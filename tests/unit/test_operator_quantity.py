"""Quantities canonicalised as the API server stores them (apimachinery resource.Quantity).

Expected strings come from apimachinery's own tests (quantity_test.go: TestQuantityParse,
TestQuantityParseEmit) and the Kubernetes documentation; none are derived from our code.
"""

from __future__ import annotations

import pytest

from distgnn_operator.quantity import QuantityError, canonical, canonical_or_same

CANONICAL = [
    # what users write in requests/limits, and what `kubectl get -o yaml` shows back
    ("0.5", "500m"),
    ("2048Mi", "2Gi"),
    ("1000m", "1"),
    ("1.5", "1500m"),
    ("0.1", "100m"),
    ("1000", "1k"),
    ("500m", "500m"),
    ("1536Mi", "1536Mi"),
    ("1Gi", "1Gi"),
    ("0.9Gi", "966367641600m"),
    ("129e6", "129e6"),
    ("128974848", "128974848"),
    # apimachinery TestQuantityParseEmit
    ("1Ki", "1Ki"),
    ("1Mi", "1Mi"),
    ("1024Mi", "1Gi"),
    ("1000M", "1G"),
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    (".000000000001Ki", "2n"),
    # apimachinery TestQuantityParse (values and formats), rendered
    ("0", "0"),
    ("0Mi", "0"),
    ("0n", "0"),
    ("50k", "50k"),
    ("40T", "40T"),
    ("1e3", "1e3"),
    ("1E6", "1e6"),
    ("0.5e0", "500e-3"),
    ("1.2e3", "1200"),
    ("8.1k", "8100"),
    ("3.001n", "4n"),
    ("1.1E-9", "2e-9"),
    ("0.0000000001", "1n"),
    ("0.00000012345", "124n"),
    ("9Ei", "9223372036854775807"),
    ("12E", "12E"),
    ("0.5Mi", "512Ki"),
    ("0.5Ki", "512"),
    (".0001k", "100m"),
    ("1.", "1"),
    ("1.G", "1G"),
    ("+1Ki", "1Ki"),
    ("-1Ki", "-1Ki"),
    ("-0.5", "-500m"),
]


@pytest.mark.parametrize(("text", "want"), CANONICAL)
def test_canonical_matches_the_api_server(text: str, want: str) -> None:
    assert canonical(text) == want
    assert canonical(want) == want  # canonical forms are fixed points


@pytest.mark.parametrize(
    "text",
    ["", "-", "aoeu", "1.1.M", "1+1.0M", "0.1mi", "0.1am", ".5i", "1i", "-3.01e-", " 1", "1 "],
)
def test_invalid_quantities_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        canonical(text)


def test_canonical_or_same_leaves_non_quantities() -> None:
    assert canonical_or_same("2048Mi") == "2Gi"
    assert canonical_or_same(2) == "2"
    assert canonical_or_same("fast-ssd") == "fast-ssd"
    assert canonical_or_same(True) is True


def test_the_api_parse_reads_quantities_as_the_operator_does() -> None:
    """``distgnn.api`` compares requests with limits (each request at most its limit) with
    its own small reader (the runtime does not import the operator): the same values."""
    from fractions import Fraction

    from distgnn.api.fields import quantity_value
    from distgnn_operator.quantity import parse

    for text, _ in CANONICAL:
        try:
            value, _fmt = parse(text)
        except QuantityError:
            continue
        got = quantity_value(text)
        assert got is not None, text
        if abs(value) >= 2**62:  # the API server saturates binary forms at 2^63-1
            continue
        assert abs(got - value) < Fraction(1, 10**9), (text, got, value)
