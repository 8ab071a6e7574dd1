#!/usr/bin/env bash
# The real install on the local cluster, as a user installs a release from their registry: the
# project image and the packaged chart pushed to the cluster's registry (hack/registry.sh), then
# `helm upgrade --install` of the chart from oci:// by version, with self-managed certificates;
# the real node's containerd pulls the image.
#   hack/deploy.sh up IMG     push IMG (built by `make image`) and the chart, install or upgrade
#   hack/deploy.sh down       uninstall the release
# Environment: KUBESTEER_RELEASE (kubesteer), KUBESTEER_RELEASE_NAMESPACE (kubesteer-system),
# KUBESTEER_DEPLOY_TIMEOUT (how long helm --wait waits for every pod to be Ready, default 5m).
# The image's tag and the chart's version are the workspace version (Cargo.toml); the image is
# pulled Always, so a rebuilt image of the same version reaches the next pods.
# The release installs and upgrades the CRDs (the chart's crds.enabled): --take-ownership adopts
# the ones hack/cluster.sh applied before any release (`make install`), as a user upgrading from
# 0.1.0 adopts the ones Helm installed from that chart's crds/ (docs/upgrading.md).
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
  local img=$1 version registry ca chart_dir
  version=$(workspace_version)
  registry=$("$root/hack/registry.sh" address)
  ca=$("$root/hack/registry.sh" ca)
  "$root/hack/registry.sh" push-image "$img" "kubesteer:$version"
  chart_dir=$(mktemp -d)
  "${helm[@]}" package "$root/charts/kubesteer" -d "$chart_dir" >/dev/null
  "$root/hack/registry.sh" push-chart "$chart_dir/kubesteer-$version.tgz"
  rm -rf "$chart_dir"
  local auth=() client_ca="$state/apiserver-client/ca.crt"
  [ ! -f "$client_ca" ] || auth=(--set-file "webhook.apiserverAuth.clientCA=$client_ca")
  log "helm upgrade --install $release oci://$registry/charts/kubesteer --version $version in $ns"
  "${helm[@]}" upgrade --install "$release" "oci://$registry/charts/kubesteer" --version "$version" \
    --ca-file "$ca" -n "$ns" --create-namespace -f "$root/hack/real-node-values.yaml" \
    --set "image.repository=$registry/kubesteer" --set image.pullPolicy=Always \
    ${auth[@]+"${auth[@]}"} --take-ownership --wait --timeout "${KUBESTEER_DEPLOY_TIMEOUT:-5m}"
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
