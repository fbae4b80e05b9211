"""Field metadata: how a dataclass field becomes a schema property and is validated.

Every field of the API types is declared with :func:`fld`, which records its
documentation and bounds once. The schema builder (:mod:`distgnn.api.schema`) and
the manifest parser (:mod:`distgnn.api.validate`) both read this metadata, so the
CRD and ``distgnn run`` enforce the same rules.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NewType

Quantity = NewType("Quantity", str)
"""A Kubernetes resource quantity (``500m``, ``2Gi`` or an integer)."""

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""A Service name (RFC 1035: starts with a letter); a resource's Services are NAME-...,
so its name must be one too."""
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
"""A label value (also a node selector's or a toleration's value), as the API server checks
it (apimachinery ``IsValidLabelValue``): at most 63 characters, alphanumeric at both ends."""
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""A label key, a toleration's key (``IsQualifiedName``): an optional DNS subdomain prefix
(at most 253 characters) and ``/``, then a name of at most 63."""
ANNOTATION_KEY = (
    r"^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""An annotation key: :data:`QUALIFIED_NAME`, any case (the API server checks it lower-cased)."""
# An OCI image reference, as distribution/reference's ReferenceRegexp (RE2 and Python alike):
# [host[:port]/]path[:tag][@digest], path components lower-case.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
IMAGE_REF = (
    rf"^(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
DOMAIN_PREFIXED_PATH = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$"
)
"""A domain-prefixed path (``kueue.x-k8s.io/multikueue``): a DNS subdomain, ``/``, then
RFC 3986 path characters, as apimachinery's ``IsDomainPrefixedPath`` (batch Job's
``spec.managedBy``)."""
HTTP_URL = r"^https?://[^/\s]+(/\S*)?$"
CANONICAL_ETYPE = r"^[^:\s]+:[^:\s]+:[^:\s]+$"
"""A canonical edge type ``SRC_TYPE:RELATION:DST_TYPE`` (three names, no blanks)."""
STORAGE_SCHEMES = ("s3", "s3a", "file")
"""URL schemes of graph, partition and checkpoint URLs in a cluster: what the runtime image
ships (fsspec with s3fs). ``file:///`` is a path inside the pod."""
URL_MAX = 2048
NAME_MAX = 253
META_KEY = "distgnn"


@dataclass(frozen=True)
class Meta:
    """Documentation and bounds of one field (all bounds optional, strings default-bounded)."""

    doc: str
    name: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    min_length: int | None = None
    max_length: int = NAME_MAX
    pattern: str | None = None
    enum: tuple[str, ...] | None = None
    min_items: int | None = None
    max_items: int = 64
    item_minimum: float | None = None
    item_maximum: float | None = None
    preserve_unknown: bool = False
    fmt: str | None = None
    schemes: tuple[str, ...] | None = None
    """URL schemes accepted: the CRD requires a URL with one of them; local mode also
    accepts a plain (relative or absolute) path."""
    keys: str | None = None
    """For a map: the pattern its keys must match (labels, annotations, a node selector).
    Checked when parsed (the operator reports InvalidSpec), not by the CRD: a structural
    schema cannot constrain map keys."""
    shape: str | None = None
    """For a free-form (``preserve_unknown``) field: the Kubernetes type whose known
    fields it may hold (:mod:`distgnn.api.k8s_shapes`), checked when parsed."""
    hint: str | None = None
    """Why a number's bound is what it is, added to the error of a value beyond it."""

    def for_items(self) -> Meta:
        """The bounds a list's items or a map's values get (``item_minimum``/``item_maximum``;
        no length, format or scheme of the container's own)."""
        return dataclasses.replace(
            self,
            minimum=self.item_minimum,
            maximum=self.item_maximum,
            exclusive_minimum=False,
            exclusive_maximum=False,
            min_length=None,
            fmt=None,
            schemes=None,
        )


def url_pattern(schemes: tuple[str, ...]) -> str:
    """The CRD pattern of a URL field: ``SCHEME://BUCKET[/KEY]`` or ``file:///PATH``."""
    alts = [r"file:///\S+" if s == "file" else rf"{s}://[^/\s]+(/\S*)?" for s in schemes]
    return "^(" + "|".join(alts) + ")$"


def scheme_problem(m: Meta, value: str) -> str | None:
    """Why ``value`` is refused by a URL field in local mode (paths are fine), or None."""
    if m.schemes is None or "://" not in value:
        return None
    scheme = value.split("://", 1)[0]
    if scheme in m.schemes:
        return None
    ok = ", ".join(f"{s}://" for s in m.schemes)
    return f"unsupported URL scheme {scheme}:// (supported: {ok} or a local path)"


@dataclass(frozen=True)
class Rule:
    """A validation rule: the CEL text for the API server and the same check in Python.

    ``check`` receives the parsed dataclass; transition rules (``oldSelf``) have no
    Python check because a single manifest has no previous version. An empty ``cel``: a
    check the CRD cannot express (map keys, quantity arithmetic before Kubernetes 1.29's
    CEL quantity library), made only when the manifest is parsed (the operator reports
    InvalidSpec).
    """

    cel: str
    message: str
    check: Callable[[Any], bool] | None = None
    field: str | None = None


def fld(
    default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, doc: str, **kw: Any
) -> Any:
    """A dataclass field carrying its :class:`Meta`."""
    md = {META_KEY: Meta(doc=doc, **kw)}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=md)
    return dataclasses.field(default=default, metadata=md)


def meta_of(f: dataclasses.Field[Any]) -> Meta:
    m = f.metadata.get(META_KEY)
    if not isinstance(m, Meta):
        raise TypeError(f"field {f.name} is not declared with distgnn.api.fields.fld")
    return m


def json_name(f: dataclasses.Field[Any]) -> str:
    """camelCase name of a field (``num_parts`` -> ``numParts``), or its explicit name."""
    m = f.metadata.get(META_KEY)
    if isinstance(m, Meta) and m.name:
        return m.name
    head, *rest = f.name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


_QUANTITY_SUFFIX = {
    **{k: Fraction(10) ** e for k, e in (("n", -9), ("u", -6), ("m", -3), ("", 0))},
    **{k: Fraction(10) ** e for k, e in (("k", 3), ("M", 6), ("G", 9), ("T", 12))},
    **{"P": Fraction(10) ** 15, "E": Fraction(10) ** 18},
    **{k: Fraction(1024) ** (i + 1) for i, k in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def quantity_value(q: str) -> Fraction | None:
    """The exact value of a Kubernetes quantity (``500m``, ``2Gi``, ``1e3``); None if it is
    not one (:data:`QUANTITY`)."""
    s = str(q).strip()
    if not re.match(QUANTITY, s):
        return None
    m = re.match(r"^([+-]?[0-9.]+)(.*)$", s)
    if m is None:
        return None
    num, suffix = m.groups()
    if suffix[:1] in ("e", "E") and suffix not in _QUANTITY_SUFFIX:
        return Fraction(num) * Fraction(10) ** int(suffix[1:])
    return Fraction(num) * _QUANTITY_SUFFIX[suffix]
