//! The build script of the binaries that serve the webhook (`kubesteer-webhook`, and the image's
//! multi-call `kubesteer`): optimized builds link the functions listed in
//! `webhook/hot-code.order` first and in that order (lld's `--symbol-ordering-file`), so the
//! review path's code is on few pages. `hack/hot-code.sh` writes the list, by demangled name;
//! `hack/cc-link.sh` (the linker command, `.cargo/config.toml`) resolves the names to the link's
//! own symbols.
//!
//! Only on x86_64 Linux with glibc, where rustc links with lld by default; a name the build does
//! not have is skipped (`--no-warn-symbol-ordering`), so a stale list costs memory, never a
//! build. `KUBESTEER_HOT_CODE_ORDER=off` links without it (what `hack/hot-code.sh` profiles).
use std::env;
use std::path::PathBuf;

fn main() {
    let order = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("../webhook/hot-code.order");
    println!("cargo:rerun-if-env-changed=KUBESTEER_HOT_CODE_ORDER");
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("KUBESTEER_HOT_CODE_ORDER") == "off" {
        return;
    }
    println!("cargo:rerun-if-changed={}", order.display());
    let wanted = var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if !wanted || !order.is_file() {
        return;
    }
    let Ok(order) = order.canonicalize() else {
        return;
    };
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}
