# Sourced by the scripts that run on a cluster of their own (hack/e2e.sh, hack/test-run.sh): with
# $root the checkout, exports KUBESTEER_CLUSTER=$2 and KUBESTEER_STATE=$3 and refuses (exit 2)
# when they name `make run`'s cluster (kubesteer, .kubesteer/). $1 tags the message.
own_cluster() {
  export KUBESTEER_CLUSTER=$2 KUBESTEER_STATE=$3
  if [ "$KUBESTEER_CLUSTER" = kubesteer ] || [ "$(realpath -m "$KUBESTEER_STATE")" = "$root/.kubesteer" ]; then
    echo "[$1] refusing to run on make run's cluster (kubesteer, .kubesteer/): pick another name and state" >&2
    exit 2
  fi
}
