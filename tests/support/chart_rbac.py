"""What the Helm chart's RBAC grants the operator, rendered by the real ``helm`` binary.

Used by the emulator tests to check that every request the operator makes is one the
chart's (Cluster)Role allows, as a real API server's authorizer would.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "distgnn"
RELEASE = "dg"


def helm() -> str:
    found = shutil.which("helm") or str(REPO / ".tools" / "bin" / "helm")
    if not os.access(found, os.X_OK):
        raise RuntimeError("the helm binary is missing: run `make install` (.tools/bin/helm)")
    return found


@functools.cache
def _grants(values_json: str) -> frozenset[tuple[str, str, str]]:
    res = subprocess.run(
        [helm(), "template", RELEASE, str(CHART), "--namespace", "distgnn-system", "-f", "-"],
        input=yaml.safe_dump(json.loads(values_json)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out: set[tuple[str, str, str]] = set()
    for obj in yaml.safe_load_all(res.stdout):
        if not obj or obj["kind"] not in ("ClusterRole", "Role"):
            continue
        if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] != f"{RELEASE}-distgnn":
            continue  # the users' aggregated roles
        for rule in obj["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    out.update((g, r, v) for v in rule["verbs"])
    return frozenset(out)


def operator_grants(values: dict[str, Any] | None = None) -> frozenset[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the chart's operator roles grant with ``values``."""
    return _grants(json.dumps(values or {}, sort_keys=True))
