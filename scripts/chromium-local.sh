#!/usr/bin/env bash
# Make sure the dashboard's browser tests find a headless Chromium: the one
# SCHEDLOOP_CHROMIUM names, or Debian's package at /usr/bin/chromium (the
# places the tests look). When neither is there it installs Debian's
# chromium package, as root or through passwordless sudo, and says so;
# otherwise it prints the command to run and fails.
set -euo pipefail

for p in "${SCHEDLOOP_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
  if [[ -n "$p" && -x "$p" ]]; then
    echo "Chromium for the dashboard's browser tests: $p"
    exit 0
  fi
done

install=(apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium)
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "Chromium is not installed and the dashboard's browser tests need it." >&2
  echo "Install it with: sudo ${install[*]}   (or set SCHEDLOOP_CHROMIUM to a Chromium binary)" >&2
  exit 1
fi
echo "installing Debian's chromium package for the dashboard's browser tests (apt-get install chromium)"
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" "${install[@]}" >/dev/null
echo "Chromium for the dashboard's browser tests: $(command -v chromium)"
