#!/usr/bin/env bash
# Applies the committed CRDs with the kubectl command given as arguments, e.g.
#   hack/crds.sh ~/.cache/kubesteer/bin/kubectl --kubeconfig .kubesteer/kubeconfig
# A conversion webhook that ran outside the cluster (make run MODE=host, the e2e conversion
# test) leaves a `url` in the Scaler CRD's conversion. The committed file names a `service`, and
# an apply cannot remove a field another manager wrote, while the apiserver wants exactly one of
# the two: so the committed Service is put back first. A running webhook points the conversion at
# itself again within its next check round.
. "$(dirname "$0")/lib.sh"
kubectl=("$@")
crds="$root/charts/kubesteer/files/crds/"
url=$("${kubectl[@]}" get crd scalers.kubesteer.io --ignore-not-found \
  -o jsonpath='{.spec.conversion.webhook.clientConfig.url}')
if [ -n "$url" ]; then
  "${kubectl[@]}" patch crd scalers.kubesteer.io --type=merge -p \
    '{"spec":{"conversion":{"webhook":{"clientConfig":{"url":null,"service":{"namespace":"kubesteer-system","name":"kubesteer-webhook","path":"/convert","port":443}}}}}}' >/dev/null
fi
"${kubectl[@]}" apply --server-side --force-conflicts -f "$crds" >/dev/null
# Not `kubectl wait --for=condition=Established`: it fails at once on a CRD that has no status
# yet ("accessor error: <nil> is of the type <nil>"), which a just-created one may not.
want=$(for _ in "$crds"*.yaml; do printf 'True '; done)
deadline=$((SECONDS + 60))
until [ "$("${kubectl[@]}" get -f "$crds" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{" "}{end}')" = "$want" ]; do
  [ "$SECONDS" -lt "$deadline" ] || die "the CRDs in $crds were not Established within 60s"
  sleep 0.25
done
