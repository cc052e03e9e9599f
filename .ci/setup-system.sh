#!/usr/bin/env bash
# System packages the tests need, installed with apt-get (as root, or through sudo):
#   chromium        the browser the viewer's tests drive with Playwright (no browser download)
#   fonts-noto-cjk  so Chinese renders in the pages, screenshots and PNG figures
# Skips the install when both are already present.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -e /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium fonts-noto-cjk
