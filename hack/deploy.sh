#!/usr/bin/env bash
# The real install on the local cluster: the project image loaded into the real node's containerd,
# then `helm upgrade --install` of the chart with self-managed certificates.
#   hack/deploy.sh up IMG     load IMG (built by `make image`) and install or upgrade the release
#   hack/deploy.sh down       uninstall the release
# Environment: KUBESTEER_RELEASE (kubesteer), KUBESTEER_RELEASE_NAMESPACE (kubesteer-system),
# KUBESTEER_IMAGE_ARCHIVE (where `make image` exported IMG, default $KUBESTEER_STATE/image.tar),
# KUBESTEER_DEPLOY_TIMEOUT (how long helm --wait waits for every pod to be Ready, default 5m).
# When hack/cluster.sh made the apiserver's client certificate for webhooks, its CA goes to the
# chart (webhook.apiserverAuth.clientCA), so the webhook answers reviews from the apiserver only.
. "$(dirname "$0")/lib.sh"
state=${KUBESTEER_STATE:-$root/.kubesteer}
release=${KUBESTEER_RELEASE:-kubesteer}
ns=${KUBESTEER_RELEASE_NAMESPACE:-kubesteer-system}
kc=${KUBECONFIG:-$state/kubeconfig}
helm=("$cache/bin/helm" --kubeconfig "$kc")
kubectl=("$cache/bin/kubectl" --kubeconfig "$kc")

up() {
  local img=$1 archive=${KUBESTEER_IMAGE_ARCHIVE:-$state/image.tar}
  [ -f "$archive" ] || { log "no $archive: make image IMG=$img first"; exit 1; }
  "$root/hack/node.sh" load "$archive"
  local auth=() client_ca="$state/apiserver-client/ca.crt"
  [ ! -f "$client_ca" ] || auth=(--set-file "webhook.apiserverAuth.clientCA=$client_ca")
  log "helm upgrade --install $release ($img) in $ns"
  "${helm[@]}" upgrade --install "$release" "$root/charts/kubesteer" -n "$ns" --create-namespace \
    -f "$root/hack/real-node-values.yaml" --set "image.repository=${img%:*}" --set "image.tag=${img##*:}" \
    ${auth[@]+"${auth[@]}"} --wait --timeout "${KUBESTEER_DEPLOY_TIMEOUT:-5m}"
  "${kubectl[@]}" -n "$ns" get pods -o wide
}

down() {
  "${helm[@]}" uninstall "$release" -n "$ns" --wait --timeout 2m --ignore-not-found
}

case ${1:-} in
  up) up "${2:-kubesteer:dev}" ;;
  down) down ;;
  *) echo "usage: $0 up IMG|down" >&2; exit 2 ;;
esac
