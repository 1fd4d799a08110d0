#!/usr/bin/env bash
# A failover to watch, start to end, with nothing to set up: starts a fresh flotilla-server and
# six member agents (member1..member3 pull, member4..member6 push) as separate processes on
# 127.0.0.1, drives them with curl, jq and kubectl as a user would, and prints a narrated
# timeline. Every step has a deadline; a step that misses it stops the demo with a non-zero exit
# status naming it. Every process the demo starts is stopped, and its temporary directory
# removed, on any exit (failure and Ctrl-C included).
#
#   scripts/demo.sh                          release binaries when the quickstart's release
#                                            build made them (brought up to date, quickly),
#                                            otherwise debug binaries, as the tests build them
#   scripts/demo.sh --release                release binaries (built if missing)
#   scripts/demo.sh --debug                  debug binaries
#   FLOTILLA_BIN_DIR=DIR scripts/demo.sh     the binaries in DIR, as they are (no build)
#   scripts/demo.sh --keep                   keep the temporary directory (logs, data) at exit
#   FLOTILLA_DEMO_DEADLINE_PERCENT=300 ...   every step's deadline at 300% (a slow machine)
#
# The server runs with --fast-failover: second-scale failure detection, a profile for demos and
# tests, not for production (docs/failover.md, "Flags"). tests/tests/demo.rs runs this script.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROFILE=
KEEP=false
for arg in "$@"; do
  case $arg in
    --release) PROFILE=release ;;
    --debug) PROFILE=debug ;;
    --keep) KEEP=true ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "demo.sh: unknown argument $arg (see --help)" >&2
      exit 2
      ;;
  esac
done

for tool in curl jq kubectl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "demo.sh: $tool is missing: run scripts/setup.sh" >&2
    exit 1
  fi
done

# ---------------------------------------------------------------------------------------------
# The timeline: every line is stamped with the seconds since the demo started; a line about a
# failure also says how long after the kill it came.

T0=${EPOCHREALTIME/./}
STEP="starting"
# The demo's own stderr, for failures: a failure (or Ctrl-C) may come while a check's output is
# redirected to /dev/null.
exec 3>&2
KILLED_AT=""

now_us() { echo "${EPOCHREALTIME/./}"; }

# seconds FROM TO: the time from FROM to TO (microseconds), as 12.3.
seconds() {
  local d=$(($2 - $1))
  printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000))
}
# seconds_since MICROSECONDS: the time since then, as 12.3.
seconds_since() { seconds "$1" "$(now_us)"; }

# say TEXT: one line of the timeline.
say() {
  local line
  line=$(printf '%8s  %s' "+$(seconds_since "$T0")s" "$*")
  if [ -n "$KILLED_AT" ]; then line+=" ($(seconds_since "$KILLED_AT") s after the kill)"; fi
  echo "$line"
}

# note TEXT: an explanation under a line, not stamped.
note() { printf '%8s  %s\n' "" "$*"; }

# show COMMAND...: runs a command a user would type and prints it with its output, indented.
show() {
  printf '%8s  $ %s\n' "" "$*"
  "$@" 2>&1 | sed 's/^/            /'
}

step() {
  STEP=$1
  KILLED_AT=""
  echo
  echo "== $1"
}

fail() {
  echo "demo.sh: FAILED at step \"$STEP\": $*" >&3
  exit 1
}

# wait_for SECONDS DESCRIPTION COMMAND...: runs COMMAND every 0.2 s until it succeeds, then
# prints DESCRIPTION on the timeline; the demo fails, naming the step, if SECONDS (times
# FLOTILLA_DEMO_DEADLINE_PERCENT / 100) pass first.
DEADLINE_PERCENT=${FLOTILLA_DEMO_DEADLINE_PERCENT:-100}
[[ $DEADLINE_PERCENT =~ ^[1-9][0-9]*$ ]] ||
  fail "FLOTILLA_DEMO_DEADLINE_PERCENT must be a positive integer, not $DEADLINE_PERCENT"
wait_for() {
  local seconds=$(($1 * DEADLINE_PERCENT / 100)) what=$2
  local until=$(($(now_us) + $1 * DEADLINE_PERCENT * 10000))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$(now_us)" -ge "$until" ]; then fail "not within ${seconds} s: $what"; fi
    sleep 0.2
  done
  say "$what"
}

# ---------------------------------------------------------------------------------------------
# Processes: each one started is stopped at exit.

declare -A PID=()
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flotilla-demo.XXXXXX")

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local name
  for name in "${!PID[@]}"; do kill -TERM "${PID[$name]}" 2>/dev/null || true; done
  local until=$(($(now_us) + 5000000)) alive
  while :; do
    alive=false
    for name in "${!PID[@]}"; do
      if kill -0 "${PID[$name]}" 2>/dev/null; then alive=true; fi
    done
    if [ "$alive" = false ] || [ "$(now_us)" -ge "$until" ]; then break; fi
    sleep 0.1
  done
  for name in "${!PID[@]}"; do kill -KILL "${PID[$name]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$rc" -ne 0 ] && [ -f "$WORK/server.log" ]; then
    echo "demo.sh: the server's last log lines:" >&3
    tail -n 30 "$WORK/server.log" | sed "s/\x1b\[[0-9;]*m//g" >&3 || true
  fi
  if [ "$KEEP" = true ]; then
    echo "demo.sh: logs and data kept in $WORK" >&3
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME COMMAND...: starts COMMAND in the background, stdout in $WORK/NAME.out, stderr
# (its log) in $WORK/NAME.log.
start() {
  local name=$1
  shift
  : >"$WORK/$name.out" # before url_of reads it (and so that a restart's old URL is gone)
  "$@" >>"$WORK/$name.out" 2>"$WORK/$name.log" &
  PID[$name]=$!
}

# url_of NAME PREFIX: the URL NAME prints after PREFIX on its stdout once it listens.
url_of() {
  local name=$1 prefix=$2 url until=$(($(now_us) + 60000000))
  while :; do
    url=$(sed -n "s|^$prefix ||p" "$WORK/$name.out" | head -n 1)
    if [ -n "$url" ]; then
      echo "$url"
      return
    fi
    kill -0 "${PID[$name]}" 2>/dev/null || fail "$name exited: $(tail -n 5 "$WORK/$name.log")"
    [ "$(now_us)" -lt "$until" ] || fail "$name printed no URL within 60 s"
    sleep 0.1
  done
}

# sigkill NAME...: SIGKILLs the processes, as a crash would; the timeline's lines that follow
# say how long after it they came.
sigkill() {
  local name
  {
    for name in "$@"; do kill -KILL "${PID[$name]}" || fail "$name is not running"; done
    KILLED_AT=${EPOCHREALTIME/./}
    # Reaped here, where bash's "Killed" notices go to /dev/null.
    for name in "$@"; do wait "${PID[$name]}" || true; done
  } 2>/dev/null
  for name in "$@"; do unset "PID[$name]"; done
}

# ---------------------------------------------------------------------------------------------
# The binaries.

if [ -n "${FLOTILLA_BIN_DIR:-}" ]; then
  BIN=$FLOTILLA_BIN_DIR
else
  TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
  if [ -z "$PROFILE" ]; then
    # The README's quickstart builds release binaries: use them rather than start a debug build
    # of several minutes right after it.
    if [ -x "$TARGET/release/flotilla-server" ] && [ -x "$TARGET/release/flotilla-agent" ]; then
      PROFILE=release
    else
      PROFILE=debug
    fi
  fi
  BIN=$TARGET/$PROFILE
  build=(cargo build --quiet -p flotilla-server -p flotilla-agent --bins)
  if [ "$PROFILE" = release ]; then build+=(--release); fi
  echo "Building: ${build[*]}"
  (cd "$ROOT" && "${build[@]}")
fi
for bin in flotilla-server flotilla-agent; do
  [ -x "$BIN/$bin" ] || fail "no $BIN/$bin"
done

# ---------------------------------------------------------------------------------------------
# The API, through curl and kubectl.

CLUSTERS=/apis/cluster.karmada.io/v1alpha1/clusters
RBS=/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings
NGINX=$RBS/nginx-deployment
BRAKE=/apis/flotilla.io/v1alpha1/evictionbrakes/no-region
SIMS=/apis/flotilla.io/v1alpha1/failoversimulations

api() { curl -sS --fail-with-body -H "Authorization: Bearer $TOKEN" "$@"; }
get() { api "$FLOTILLA$1"; }
kubectl() { command kubectl --cache-dir "$WORK/kube-cache" "$@"; }
works_of() { echo "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-$1/works"; }

# ready_is CLUSTER STATUS: the cluster's Ready condition has STATUS.
ready_is() {
  get "$CLUSTERS/$1" |
    jq -e --arg s "$2" 'any(.status.conditions[]?; .type == "Ready" and .status == $s)'
}
# ready_count N: N clusters are Ready.
ready_count() {
  get "$CLUSTERS" | jq -e --argjson n "$1" \
    '[.items[] | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))]
     | length == $n'
}
untainted() { get "$CLUSTERS/$1" | jq -e '(.spec.taints // []) == []'; }
# tainted CLUSTER KEY: the cluster has the NoExecute taint KEY.
tainted() {
  get "$CLUSTERS/$1" | jq -e --arg k "$2" 'any(.spec.taints[]?; .key == $k and .effect == "NoExecute")'
}
# placement [BINDING]: spec.clusters as member2:3,member1:1.
placement() {
  get "${1:-$NGINX}" | jq -r '[.spec.clusters[]? | "\(.name):\(.replicas)"] | join(",")'
}
# placed_is PLACEMENT [BINDING]: the binding (nginx's by default) is placed so.
placed_is() { [ "$(placement "${2:-$NGINX}")" = "$1" ]; }
# settled_without CLUSTER: the scheduler has seen nginx's last change, and CLUSTER is not in it.
settled_without() {
  get "$NGINX" | jq -e --arg c "$1" '.metadata.generation == .status.schedulerObservedGeneration
    and (.spec.clusters | length > 0) and all(.spec.clusters[]; .name != $c)'
}
healthy_on() {
  get "$NGINX" | jq -e --arg c "$1" \
    'any(.status.aggregatedStatus[]?; .clusterName == $c and .health == "Healthy")'
}
no_eviction_tasks() { get "$NGINX" | jq -e '(.spec.gracefulEvictionTasks // []) == []'; }
# event REASON TEXT: the message of nginx's latest Event of REASON that mentions TEXT.
event() {
  get "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dnginx-deployment" |
    jq -er --arg r "$1" --arg t "$2" \
      '[.items[] | select(.reason == $r and (.message | contains($t)))] | last | .message'
}
work_waiting() {
  get "$(works_of "$1")" |
    jq -e '(.items | length) > 0 and all(.items[]; .metadata.deletionTimestamp != null)'
}
no_works() { get "$(works_of "$1")" | jq -e '.items == []'; }
ready_replicas() {
  get /apis/apps/v1/namespaces/default/deployments/nginx | jq -e --argjson n "$1" \
    '.status.readyReplicas == $n'
}
# nginx_healthy_on CLUSTER...: Healthy on each, and its 3 replicas ready.
nginx_healthy_on() {
  local c
  for c in "$@"; do healthy_on "$c" || return 1; done
  ready_replicas 3
}
brake_is() { get "$BRAKE" | jq -e --arg s "$1" '.status.state == $s'; }
back() { ready_is "$1" True && untainted "$1"; }

# ---------------------------------------------------------------------------------------------
echo "Flotilla failover demo: +seconds since the demo started (and since the kill, once one is)."

step "1. A fleet of six members: member1..member3 pull agents, member4..member6 push agents"
start server "$BIN/flotilla-server" --listen 127.0.0.1:0 --data-dir "$WORK/server" --fast-failover
FLOTILLA=$(url_of server "flotilla-server listening on")
TOKEN=$(cat "$WORK/server/admin.token")
export CURL_CA_BUNDLE=$WORK/server/tls.crt KUBECONFIG=$WORK/server/kubeconfig
say "server listening on $FLOTILLA"
note "flotilla-server --fast-failover: a pull member silent for 2 s turns Unknown, its"
note "NoExecute taint comes 2 s later, default tolerations are 0 s (a demo profile, not for"
note "production); the eviction brake keeps its default pacing."

# pull_agent NAME: a pull member's agent, with no timing flags: it renews its lease and reports
# its status as often as the server tells it (a quarter of the server's grace period).
pull_agent() {
  start "$1" "$BIN/flotilla-agent" --server "$FLOTILLA" --cluster-name "$1" \
    --token-file "$WORK/server/join.token" --ca-file "$WORK/server/tls.crt" \
    --data-dir "$WORK/$1" --listen 127.0.0.1:0 --pod-startup-delay-ms 200
  url_of "$1" "flotilla-agent listening on" >/dev/null
}
for m in member1 member2 member3; do pull_agent "$m"; done
say "member1..member3: pull agents started (no timing flags: they renew their leases every 500 ms, as the server's 2 s grace period tells them)"
declare -A PUSH_URL=()
for m in member4 member5 member6; do
  start "$m" "$BIN/flotilla-agent" --mode push --cluster-name "$m" --data-dir "$WORK/$m" \
    --listen 127.0.0.1:0 --pod-startup-delay-ms 200
  PUSH_URL[$m]=$(url_of "$m" "flotilla-agent listening on")
done
for m in member4 member5 member6; do
  printf 'apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {name: %s}\n' "$m"
  printf 'spec: {syncMode: Push, apiEndpoint: "%s"}\n---\n' "${PUSH_URL[$m]}"
done | kubectl apply -f - >/dev/null
say "member4..member6: push agents started, their Clusters created with spec.syncMode: Push"
wait_for 60 "6 members Ready" ready_count 6
show kubectl get clusters
wait_for 30 "eviction brake Normal: its startup grace (one monitor grace period, 2 s) is over" \
  brake_is Normal

step "2. Scenario 02: nginx, 3 replicas divided 1:2 over member1 and member2"
kubectl apply -f "$ROOT/examples/02-divided-weighted-failover.yaml" >/dev/null
# A second workload, on member3..member6: what the brake holds at step 6.
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: default}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  placement:
    clusterAffinity: {clusterNames: [member3, member4, member5, member6]}
    replicaScheduling: {replicaSchedulingType: Duplicated}
YAML
say "kubectl apply -f examples/02-divided-weighted-failover.yaml (and web, one copy on each of member3..member6)"
wait_for 60 "nginx placed: member1:1,member2:2" placed_is "member1:1,member2:2"
wait_for 60 "nginx Healthy on member1 and member2 (3 replicas ready)" \
  nginx_healthy_on member1 member2
wait_for 60 "web placed on member3..member6" \
  placed_is "member3:1,member4:1,member5:1,member6:1" "$RBS/web-deployment"
show kubectl get rb nginx-deployment -o wide

step "3. member1 fails"
say "member1's agent killed (SIGKILL)"
sigkill member1
wait_for 30 "member1 Ready=Unknown (no lease for 2 s)" ready_is member1 Unknown
wait_for 30 "member1 tainted cluster.karmada.io/unreachable:NoExecute" \
  tainted member1 cluster.karmada.io/unreachable
wait_for 30 "nginx evicted from member1 (EvictWorkloadFromClusterSucceed)" \
  event EvictWorkloadFromClusterSucceed member1
MEMBER1_OUT=$(now_us)
note "$(event EvictWorkloadFromClusterSucceed member1)"
wait_for 30 "replicas rescheduled: member2:3" placed_is "member2:3"
wait_for 30 "Healthy on member2 (3 replicas ready)" \
  nginx_healthy_on member2
wait_for 30 "eviction task done (EvictionTaskDoneHealthy): member1's copy may go" no_eviction_tasks
wait_for 30 "member1's Work waits for it (deletionTimestamp set, its agent is down)" \
  work_waiting member1

step "4. member1 returns"
pull_agent member1
say "member1's agent started again, with its data directory"
wait_for 30 "member1 Ready=True, its taints removed" back member1
wait_for 30 "member1 back: stale Work removed" no_works member1
say "nothing moves back: nginx stays $(placement)"

step "5. Dry-run: what if member2 failed?"
SIM=$(api -X POST -H 'Content-Type: application/json' "$FLOTILLA$SIMS" -d '{
  "apiVersion": "flotilla.io/v1alpha1", "kind": "FailoverSimulation",
  "metadata": {"name": "member2-fails"}, "spec": {"failedClusters": ["member2"]}}')
PREDICTED=$(jq -r '.status.bindings[] | select(.name == "nginx-deployment")
  | [.clustersAfter[] | "\(.name):\(.replicas)"] | join(",")' <<<"$SIM")
[ -n "$PREDICTED" ] || fail "the dry-run names no new placement for nginx: $SIM"
PREDICTED_AFTER=$(jq -r '.status.bindings[] | select(.name == "nginx-deployment")
  | .evictions[0].afterSeconds' <<<"$SIM")
say "POST $SIMS {failedClusters: [member2]}"
say "predicted: nginx $(placement) -> $PREDICTED, evicted ${PREDICTED_AFTER} s after the failure"
note "brake: $(jq -r '.status.brake.message' <<<"$SIM")"
# The brake lets one failed cluster out per 10 s (the first at once): member2 fails once
# member1's turn is 10 s past, so that it goes at once as the dry-run, which starts from a full
# bucket, says.
wait_s=$(((MEMBER1_OUT + 10000000 - $(now_us)) / 1000000 + 1))
if [ "$wait_s" -gt 0 ]; then
  note "waiting ${wait_s} s: the brake lets one failed cluster out per 10 s, and member1 went at"
  note "+$(seconds "$T0" "$MEMBER1_OUT")s; failing member2 now would hold it until its turn"
  sleep "$wait_s"
fi
say "member2's agent killed (SIGKILL)"
sigkill member2
wait_for 30 "nginx evicted from member2 and placed again" settled_without member2
ACTUAL=$(placement)
[ "$ACTUAL" = "$PREDICTED" ] || fail "nginx was placed on $ACTUAL, the dry-run predicted $PREDICTED"
say "actual: nginx $ACTUAL, as predicted"
note "(the eviction was predicted ${PREDICTED_AFTER} s after the failure; the server notices a silent"
note "member up to one --cluster-monitor-period, 300 ms, late)"
wait_for 30 "Healthy on member1 (3 replicas ready)" nginx_healthy_on member1

step "6. Three more members killed at once: member3 (pull), member4 and member5 (push)"
say "member3, member4 and member5 killed (SIGKILL): with member2, 4 of 6 clusters are down"
sigkill member3 member4 member5
brake_holds() {
  get "$BRAKE" | jq -e '.status.state == "PartialDisruption"
    and ([.status.queuedClusters[]?.name] | length) >= 2'
}
wait_for 30 "the brake holds: PartialDisruption" brake_holds
B=$(get "$BRAKE")
note "why: $(jq -r '.status.message' <<<"$B"), so failed clusters are"
note "let out at $(jq -r '.status.rate' <<<"$B") instead of one every 10 s: a partition gets minutes to heal"
note "let out (all its bindings evicted at once): $(jq -r '[.status.releasedClusters[]?.name]
  | join(", ") | if . == "" then "none" else . end' <<<"$B")"
note "queued, each waiting its turn: $(jq -r '[.status.queuedClusters[]
  | "\(.name) in \((.turnAt | sub("\\.[0-9]+"; "") | fromdateiso8601) - now | floor) s"]
  | join(", ")' <<<"$B")"
show kubectl get evictionbrakes -o wide
printf '%8s  $ %s\n' "" "curl -sH \"Authorization: Bearer \$TOKEN\" \$FLOTILLA/metrics | grep eviction_brake_clusters"
get /metrics | grep '^flotilla_eviction_brake_clusters' | sed 's/^/            /' ||
  fail "no flotilla_eviction_brake_clusters_* metrics"
QUEUED=$(jq -r '[.status.queuedClusters[].name] | join(" ")' <<<"$B")
web=$(placement "$RBS/web-deployment")
for c in $QUEUED; do
  case ",$web," in
    *",$c:"*) ;;
    *) fail "web left $c, whose turn has not come: $web" ;;
  esac
done
say "web still on ${QUEUED// /, } while they wait their turn: $web"

echo
echo "Done in $(seconds_since "$T0") s: every step met its deadline."
