# Sourced by bench/scripts/webhook.sh and bench/scripts/controller.sh: builds the Go peers in bench/peers
# (controller-runtime, pinned by bench/peers/go.mod and go.sum, modules from the Go module proxy)
# into $cache/peers, and rebuilds one only when its sources change. Needs `go` on PATH.
# Expects $root and $cache to be set.
peers_dir=$root/bench/peers
peers_cache=$cache/peers

# Prints the path of the built peer `name` (webhook, controller or tutorial), building it if
# needed. The hash covers go.mod, go.sum, the peer's sources and those of memcached/, the package
# the two Memcached peers share (the webhook does not import it, but rebuilding it then is cheap).
peer_bin() { # name
  local name=$1 hash bin
  command -v go >/dev/null || { echo "bench: the peers need Go (go on PATH)" >&2; return 1; }
  hash=$(cd "$peers_dir" && cat go.mod go.sum "$name"/*.go memcached/*.go | sha256sum | cut -c1-16)
  bin=$peers_cache/bin/$name-$hash
  if [ ! -x "$bin" ]; then
    mkdir -p "$peers_cache/bin"
    echo "[bench] building the Go $name peer ($(go version | awk '{print $3}')) into $bin" >&2
    (cd "$peers_dir" && GOPATH=$peers_cache/gopath GOCACHE=$peers_cache/gocache GOFLAGS=-mod=readonly \
      CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" "./$name") >&2
    mv "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

# The Go toolchain that built the peers, for the results.
peer_go_version() { go version | awk '{print $3}'; }
