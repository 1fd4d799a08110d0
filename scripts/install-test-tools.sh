#!/usr/bin/env bash
# Installs the command-line tools the test suite drives besides cargo: jq (the scheduling
# page's examples read `explain` output with it). kubectl is expected on PATH already.
set -euo pipefail
if ! command -v jq >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq jq
fi
