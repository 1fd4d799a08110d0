#!/usr/bin/env bash
# Installs the command-line tools the test suite drives besides cargo: kubectl (the kubectl and
# docs tests), jq (the scheduling page's examples read `explain` output with it) and curl (the
# docs' examples, and the HTTP/2 refusal test of server/tests/limits.rs); scripts/demo.sh, which
# tests/tests/demo.rs runs, needs all three. A test
# whose tool is missing fails loudly; it never skips. Debian's packages only.
set -euo pipefail
missing=()
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if ! command -v kubectl >/dev/null 2>&1; then
  # The machine image ships `kubectl`; Debian's own build of it is `kubernetes-client`.
  if apt-cache show kubectl >/dev/null 2>&1; then missing+=(kubectl); else missing+=(kubernetes-client); fi
fi
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
command -v jq >/dev/null
command -v curl >/dev/null
command -v kubectl >/dev/null
