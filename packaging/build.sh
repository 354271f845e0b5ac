#!/usr/bin/env bash
# Build the one-folder flyviz application with PyInstaller, then smoke-test it.
#   bash packaging/build.sh [PYTHON]      (default: .venv/bin/python, else python3)
# Output: dist/flyviz/flyviz (run it; `dist/flyviz/flyviz --version`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
"$PY" -m pip install -q "pyinstaller>=6" >/dev/null
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath dist --workpath build/pyinstaller packaging/flyviz.spec
end=$(date +%s)
echo "built dist/flyviz in $((end - start)) s; size $(du -sh dist/flyviz | cut -f1)"
dist/flyviz/flyviz --version
