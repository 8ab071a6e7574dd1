#!/usr/bin/env bash
# The linker command for x86_64 Linux builds (.cargo/config.toml): `cc` with the same arguments,
# except that an order file of the binaries serving the webhook (hack/hot-code-link.rs passes it
# as -Wl,--symbol-ordering-file=FILE) is turned from demangled names into this link's symbols.
#
# The file lists demangled names (hack/hot-code.sh), because a Rust symbol's mangled name carries
# a hash of its crate's build (features, profile, target): the image's static build, the
# release build and a benchmark's build name the same function differently. Here each input
# object's symbols are listed twice (mangled and demangled, one line each, in the same order),
# and every mangled symbol whose demangled name is on the list is written, in the list's order,
# to the file lld reads. Any failure links without the order: slower to fault in, never wrong.
set -uo pipefail
order=
for a in "$@"; do
  case $a in -Wl,--symbol-ordering-file=*) order=${a#-Wl,--symbol-ordering-file=} ;; esac
done
[ -n "$order" ] && [ -r "$order" ] || exec "${KUBESTEER_CC:-cc}" "$@"

objects=()
for a in "$@"; do
  case $a in *.o | *.a | *.rlib) [ -f "$a" ] && objects+=("$a") ;; esac
done
concrete=$(mktemp "${TMPDIR:-/tmp}/kubesteer-order.XXXXXX")
trap 'rm -f "$concrete"' EXIT
if [ ${#objects[@]} -gt 0 ]; then
  paste -d '\t' <(nm -j --defined-only "${objects[@]}" 2>/dev/null) \
    <(nm -j -C --defined-only "${objects[@]}" 2>/dev/null) |
    awk -F '\t' 'NR == FNR { if (!($0 in at)) at[$0] = FNR; next }
      ($2 in at) { print at[$2] "\t" $1 }' "$order" - |
    sort -s -n -k1,1 | cut -f2 | awk '!seen[$0]++' >"$concrete" || : >"$concrete"
fi
args=()
for a in "$@"; do
  case $a in
    -Wl,--symbol-ordering-file=*) [ -s "$concrete" ] && args+=("-Wl,--symbol-ordering-file=$concrete") ;;
    *) args+=("$a") ;;
  esac
done
"${KUBESTEER_CC:-cc}" "${args[@]}"
