#!/usr/bin/env bash
# Installs what building and testing Flotilla needs besides cargo, from Debian's packages only,
# whichever is missing:
#   protoc   (protobuf-compiler) the etcd-client crate's build script compiles etcd's .proto
#            files with it, so building the workspace needs it;
#   etcd     (etcd-server) the etcd store tests start real etcd processes on 127.0.0.1;
#   kubectl  the kubectl and docs tests;
#   jq       the scheduling page's examples read `explain` output with it;
#   curl     the docs' examples, and the HTTP/2 refusal test of server/tests/limits.rs;
#   chromium and chromedriver (chromium, chromium-driver) the fleet page's browser test
#            (tests/tests/fleet_page.rs) drives Debian's Chromium through its WebDriver; no browser is
#            ever downloaded at run time.
# scripts/demo.sh, which tests/tests/demo.rs runs, needs kubectl, jq and curl. A test whose tool
# is missing fails loudly; it never skips. `.ci/run` runs this script first.
set -euo pipefail

missing=()
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then missing+=(etcd-server); fi
if ! command -v kubectl >/dev/null 2>&1; then
  # The machine image ships `kubectl`; Debian's own build of it is `kubernetes-client`.
  if apt-cache show kubectl >/dev/null 2>&1; then missing+=(kubectl); else missing+=(kubernetes-client); fi
fi

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  installs_etcd=false
  for package in "${missing[@]}"; do
    [ "$package" = etcd-server ] && installs_etcd=true
  done
  # Debian's etcd-server starts an etcd service on install (127.0.0.1:2379, data in
  # /var/lib/etcd). The tests start their own; none may be left running. A policy-rc.d that
  # answers 101 ("action forbidden") keeps invoke-rc.d from starting it; one already present
  # is left as it is.
  policy=/usr/sbin/policy-rc.d
  placed_policy=false
  if $installs_etcd && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# Placed by scripts/setup.sh while it installs etcd-server.\nexit 101\n' |
      $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    placed_policy=true
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
  if $placed_policy; then
    $SUDO rm -f "$policy"
    trap - EXIT
  fi
  if $installs_etcd && [ -x /etc/init.d/etcd ]; then
    # Belt and braces: whatever the package started (there is no systemd here), stop it.
    $SUDO /etc/init.d/etcd stop >/dev/null 2>&1 || true
  fi
fi

for tool in jq curl kubectl protoc chromium chromedriver; do
  command -v "$tool" >/dev/null || { echo "setup.sh: $tool is still missing" >&2; exit 1; }
done
command -v etcd >/dev/null || [ -x /usr/bin/etcd ] || { echo "setup.sh: etcd is still missing" >&2; exit 1; }
