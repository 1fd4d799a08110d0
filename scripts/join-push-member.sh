#!/usr/bin/env bash
# Joins a Kubernetes cluster to Flotilla in push mode, as `karmadactl join` does: the control
# plane gets a Secret holding the member API's bearer token and CA bundle (namespace
# karmada-cluster, named after the member) and a Cluster with syncMode Push, the member's API
# endpoint and that Secret as its secretRef. From then on the control plane applies Works to
# the member's API itself; no agent runs there.
#
#   scripts/join-push-member.sh NAME --cluster-kubeconfig FILE [--cluster-context CTX]
#       [--token TOKEN] [--insecure-skip-tls-verification]
#
# The control plane is the one kubectl talks to by default (KUBECONFIG, or pass --kubeconfig
# through CONTROL_PLANE_KUBECONFIG). Without --token, the script creates on the member a
# ServiceAccount `flotilla-push-NAME` in namespace flotilla-system, binds it to the
# ClusterRole `flotilla-agent` of deploy/10-agent-rbac.yaml (push mode runs the same kube
# member runtime as a pull agent, so it needs the same rights), and asks the member for a token
# for it (`kubectl create token`, one year). docs/members.md, "Real clusters", walks through it.
set -euo pipefail

usage() {
  sed -n '8,10p' "$0" >&2
  exit 2
}

name=""
member_kubeconfig=""
member_context=""
token=""
insecure=false
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster-kubeconfig) member_kubeconfig="${2:?}"; shift 2 ;;
    --cluster-context) member_context="${2:?}"; shift 2 ;;
    --token) token="${2:?}"; shift 2 ;;
    --insecure-skip-tls-verification) insecure=true; shift ;;
    -h|--help) usage ;;
    -*) echo "unknown flag: $1" >&2; usage ;;
    *) [ -z "$name" ] || usage; name="$1"; shift ;;
  esac
done
[ -n "$name" ] && [ -n "$member_kubeconfig" ] || usage

member() {
  if [ -n "$member_context" ]; then
    kubectl --kubeconfig "$member_kubeconfig" --context "$member_context" "$@"
  else
    kubectl --kubeconfig "$member_kubeconfig" "$@"
  fi
}
control() {
  if [ -n "${CONTROL_PLANE_KUBECONFIG:-}" ]; then
    kubectl --kubeconfig "$CONTROL_PLANE_KUBECONFIG" "$@"
  else
    kubectl "$@"
  fi
}

endpoint=$(member config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
[ -n "$endpoint" ] || { echo "no server in $member_kubeconfig" >&2; exit 1; }

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
ca_data=$(member config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
ca_file=$(member config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')
if [ -n "$ca_data" ]; then
  printf '%s' "$ca_data" | base64 -d > "$workdir/ca.crt"
elif [ -n "$ca_file" ]; then
  cp "$ca_file" "$workdir/ca.crt"
elif [ "$insecure" != true ]; then
  echo "the member kubeconfig has no CA; pass --insecure-skip-tls-verification to skip" >&2
  exit 1
fi

if [ -z "$token" ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  member apply -f "$here/deploy/00-namespace.yaml" -f "$here/deploy/10-agent-rbac.yaml" >/dev/null
  member -n flotilla-system create serviceaccount "flotilla-push-$name" --dry-run=client \
    -o yaml | member apply -f - >/dev/null
  member create clusterrolebinding "flotilla-push-$name" --clusterrole flotilla-agent \
    --serviceaccount "flotilla-system:flotilla-push-$name" --dry-run=client -o yaml \
    | member apply -f - >/dev/null
  token=$(member -n flotilla-system create token "flotilla-push-$name" --duration 8760h)
fi

# Objects are generated client-side and sent with `create -f`: kubectl's generators send
# core kinds as protobuf, which Flotilla's API does not read (it reads JSON and YAML).
control get namespace karmada-cluster >/dev/null 2>&1 \
  || control create namespace karmada-cluster --dry-run=client -o yaml \
  | control create -f - >/dev/null
control -n karmada-cluster delete secret "$name" --ignore-not-found >/dev/null
secret_args=(--from-literal "token=$token")
if [ -s "$workdir/ca.crt" ]; then
  secret_args+=(--from-file "caBundle=$workdir/ca.crt")
fi
control -n karmada-cluster create secret generic "$name" "${secret_args[@]}" \
  --dry-run=client -o yaml | control create -f - >/dev/null

cat > "$workdir/cluster.yaml" <<EOF
apiVersion: cluster.karmada.io/v1alpha1
kind: Cluster
metadata:
  name: $name
spec:
  syncMode: Push
  apiEndpoint: $endpoint
  secretRef:
    namespace: karmada-cluster
    name: $name
  insecureSkipTLSVerification: $insecure
EOF
control create -f "$workdir/cluster.yaml" >/dev/null
echo "cluster/$name joined in push mode: $endpoint (credential: secret karmada-cluster/$name)"
