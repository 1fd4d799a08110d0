#!/usr/bin/env bash
# A highly available Flotilla on one machine, for trying it: a 3-member etcd cluster and three
# flotilla-server processes on it (--store etcd, leader election on), all on 127.0.0.1, in a
# temporary directory. It prints where everything is and which server leads, then waits;
# Ctrl-C stops every process and removes the directory.
#
#   scripts/ha-local.sh                 start and wait (debug binaries, built first)
#   scripts/ha-local.sh --check         start, check that the fleet fails over, stop: SIGTERM
#                                       of the leader hands over at once, SIGKILL of the next
#                                       within the lease; what one server writes another reads
#   scripts/ha-local.sh --release       release binaries
#   FLOTILLA_BIN_DIR=DIR ...            the binaries in DIR, as they are (no build)
#   scripts/ha-local.sh --keep          keep the temporary directory (logs, data) at exit
#
# The servers use a 3 s leader lease (--leader-elect-lease-duration 3s) so that a takeover is
# quick to watch; production keeps Kubernetes' 15 s. They serve plain HTTP and share one admin
# token (printed) so that curl works against each; see docs/operations.md for a real layout.
# tests/tests/ha.rs runs `scripts/ha-local.sh --check`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROFILE=debug
KEEP=false
CHECK=false
for arg in "$@"; do
  case $arg in
    --release) PROFILE=release ;;
    --keep) KEEP=true ;;
    --check) CHECK=true ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "ha-local.sh: unknown argument $arg (see --help)" >&2
      exit 2
      ;;
  esac
done

for tool in curl jq etcd; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "ha-local.sh: $tool is missing: run scripts/setup.sh" >&2
    exit 1
  fi
done

T0=${EPOCHREALTIME/./}
now_us() { echo "${EPOCHREALTIME/./}"; }
say() {
  local d=$(($(now_us) - T0))
  printf '+%d.%ds  %s\n' $((d / 1000000)) $((d % 1000000 / 100000)) "$*"
}
fail() {
  echo "ha-local.sh: $*" >&2
  exit 1
}

declare -A PID=()
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flotilla-ha.XXXXXX")
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local name
  for name in "${!PID[@]}"; do kill -TERM "${PID[$name]}" 2>/dev/null || true; done
  sleep 0.5
  for name in "${!PID[@]}"; do kill -KILL "${PID[$name]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    for log in "$WORK"/*.log; do
      [ -f "$log" ] || continue
      echo "ha-local.sh: last lines of $(basename "$log"):" >&2
      tail -n 8 "$log" | sed "s/\x1b\[[0-9;]*m//g" >&2 || true
    done
  fi
  if [ "$KEEP" = true ]; then echo "ha-local.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port: a TCP port on 127.0.0.1 nobody listens on (etcd needs its ports named), below
# Linux's ephemeral range (32768 and up), where outgoing connections take their ports.
free_port() {
  local port
  for _ in $(seq 1 200); do
    port=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  fail "no free port found"
}

# wait_for SECONDS DESCRIPTION COMMAND...: runs COMMAND every 0.1 s until it succeeds.
wait_for() {
  local until=$(($(now_us) + $1 * 1000000)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(now_us)" -lt "$until" ] || fail "not within $1 s: $what"
    sleep 0.1
  done
}

if [ -n "${FLOTILLA_BIN_DIR:-}" ]; then
  BIN=$FLOTILLA_BIN_DIR
else
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE
  build=(cargo build --quiet -p flotilla-server --bin flotilla-server)
  if [ "$PROFILE" = release ]; then build+=(--release); fi
  (cd "$ROOT" && "${build[@]}")
fi
[ -x "$BIN/flotilla-server" ] || fail "no $BIN/flotilla-server"

# --- etcd: three members ---------------------------------------------------------------------
declare -a CLIENT PEER
for i in 0 1 2; do
  CLIENT[i]=$(free_port)
  PEER[i]=$(free_port)
done
CLUSTER="etcd0=http://127.0.0.1:${PEER[0]},etcd1=http://127.0.0.1:${PEER[1]},etcd2=http://127.0.0.1:${PEER[2]}"
for i in 0 1 2; do
  etcd --name "etcd$i" --data-dir "$WORK/etcd$i" \
    --listen-client-urls "http://127.0.0.1:${CLIENT[i]}" \
    --advertise-client-urls "http://127.0.0.1:${CLIENT[i]}" \
    --listen-peer-urls "http://127.0.0.1:${PEER[i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${PEER[i]}" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new \
    --initial-cluster-token flotilla-ha-local --auto-compaction-retention 0 \
    --logger zap --log-level error >"$WORK/etcd$i.log" 2>&1 &
  PID[etcd$i]=$!
done
ENDPOINTS="http://127.0.0.1:${CLIENT[0]},http://127.0.0.1:${CLIENT[1]},http://127.0.0.1:${CLIENT[2]}"
wait_for 30 "etcd healthy" curl -sf "http://127.0.0.1:${CLIENT[0]}/health"
say "etcd: 3 members at $ENDPOINTS"

# --- three servers ---------------------------------------------------------------------------
TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
JOIN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
declare -a URL
start_server() {
  local i=$1 dir="$WORK/server$1"
  mkdir -p "$dir"
  printf '%s' "$TOKEN" >"$dir/admin.token"
  printf '%s' "$JOIN" >"$dir/join.token"
  : >"$WORK/server$i.out"
  "$BIN/flotilla-server" --store etcd --etcd-endpoints "$ENDPOINTS" --data-dir "$dir" \
    --listen 127.0.0.1:0 --plain-http --leader-elect-lease-duration 3s \
    >"$WORK/server$i.out" 2>"$WORK/server$i.log" &
  PID[server$i]=$!
  local until=$(($(now_us) + 60000000)) url=""
  while [ -z "$url" ]; do
    url=$(sed -n 's|^flotilla-server listening on ||p' "$WORK/server$i.out" | head -n 1)
    [ -n "$url" ] && break
    kill -0 "${PID[server$i]}" 2>/dev/null || fail "server$i exited"
    [ "$(now_us)" -lt "$until" ] || fail "server$i printed no URL within 60 s"
    sleep 0.1
  done
  URL[i]=$url
}
for i in 0 1 2; do start_server "$i"; done

api() { curl -sS --fail-with-body -H "Authorization: Bearer $TOKEN" "$@"; }
leads() { api "${URL[$1]}/metrics" 2>/dev/null | grep -x 'flotilla_leader 1' >/dev/null; }
# leader: the index of the one server that leads, when exactly one of the running ones does.
leader() {
  local i found=()
  for i in 0 1 2; do
    if [ -n "${PID[server$i]:-}" ] && leads "$i"; then found+=("$i"); fi
  done
  [ "${#found[@]}" -eq 1 ] && echo "${found[0]}"
}
# await_leader SECONDS WHAT: sets LEADER once exactly one running server leads.
await_leader() {
  local until=$(($(now_us) + $1 * 1000000))
  while :; do
    LEADER=$(leader || true)
    [ -z "$LEADER" ] || return 0
    [ "$(now_us)" -lt "$until" ] || fail "not within $1 s: $2"
    sleep 0.1
  done
}
await_leader 30 "one leader"
say "servers: ${URL[0]} ${URL[1]} ${URL[2]}; server$LEADER leads"
say "admin token: $TOKEN  (curl -H \"Authorization: Bearer \$TOKEN\" ${URL[0]}/apis)"

if [ "$CHECK" = false ]; then
  say "running; Ctrl-C stops everything"
  while :; do sleep 3600; done
fi

# --- the check -------------------------------------------------------------------------------
CMS=/api/v1/namespaces/default/configmaps
other=$(((LEADER + 1) % 3))
api -X POST -H 'content-type: application/json' "${URL[$other]}$CMS" \
  -d '{"metadata":{"name":"written-on-one"},"data":{"k":"v"}}' >/dev/null
for i in 0 1 2; do
  api "${URL[$i]}$CMS/written-on-one" | jq -e '.data.k == "v"' >/dev/null ||
    fail "server$i does not read what server$other wrote"
done
say "a ConfigMap written through server$other is read through all three"

stop_at=$(now_us)
kill -TERM "${PID[server$LEADER]}"
wait "${PID[server$LEADER]}" || true
unset "PID[server$LEADER]"
OLD=$LEADER
await_leader 5 "a new leader after SIGTERM"
NEXT=$LEADER
d=$(($(now_us) - stop_at))
say "SIGTERM of server$OLD: server$NEXT leads $((d / 1000)) ms later"
[ "$d" -le 2500000 ] || fail "the handover took $((d / 1000)) ms, more than 2 s"

kill -KILL "${PID[server$NEXT]}"
stop_at=$(now_us)
wait "${PID[server$NEXT]}" 2>/dev/null || true
unset "PID[server$NEXT]"
await_leader 10 "a new leader after SIGKILL"
LAST=$LEADER
d=$(($(now_us) - stop_at))
say "SIGKILL of server$NEXT: server$LAST leads $((d / 1000)) ms later (lease 3 s)"
[ "$d" -le 4500000 ] || fail "the takeover took $((d / 1000)) ms, more than the lease + 1.5 s"
api "${URL[$LAST]}$CMS/written-on-one" | jq -e '.data.k == "v"' >/dev/null ||
  fail "the last server lost the ConfigMap"
say "check passed"
