#!/usr/bin/env bash
# Installs what the browser test of `specops lab` (tests/test_lab_page.py) needs, idempotently:
#   bash ci/setup_browser.sh [VENV]      (VENV defaults to .venv)
# Debian's chromium + chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver) through
# apt-get when either is missing, and the selenium driver from PyPI into VENV (selenium talks
# to the system chromedriver: it downloads no browser of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null
fi
"$VENV/bin/python" -c "import selenium" 2>/dev/null ||
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "selenium>=4.10"
echo "browser: $(chromium --version 2>/dev/null); driver: $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2)"
