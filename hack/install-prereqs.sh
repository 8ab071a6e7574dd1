#!/usr/bin/env bash
# Installs what the build needs beyond Go and Rust: rustfmt and clippy, and, as root, Debian's
# container tools for the image (buildah, podman, skopeo for the release's OCI archive) and the real node (containerd, runc, CNI
# plugins, iptables), and what the plugin's end-to-end test drives: tmux (a terminal to type
# `kubectl kubesteer` into) and chromium (renders its SVG headless). Safe to re-run: installs only
# what is missing.
. "$(dirname "$0")/lib.sh"
if command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
packages=(buildah podman skopeo containerd runc containernetworking-plugins iptables iproute2 conntrack tmux chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[prereqs] apt-get install ${missing[*]}" >&2
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
  else
    echo "[prereqs] missing ${missing[*]}; install them (apt-get install ${missing[*]}) as root" >&2
  fi
fi
