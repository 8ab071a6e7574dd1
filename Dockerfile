# syntax=docker/dockerfile:1
#
# kubesteer: one image with the three programs and the kubectl plugin on PATH (links to one
# multi-call binary); the Helm chart picks one per Deployment with `command:`.
#
#   docker build --build-arg VERSION=$(awk -F'"' '/^version/{print $2; exit}' Cargo.toml) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t kubesteer:dev .
#
# Offline (no registry, no docker engine), `make image` builds the same image with buildah from
# the same static binaries: see hack/image.sh.

ARG RUST_IMAGE=rust:1-bookworm

FROM ${RUST_IMAGE} AS build
ARG TARGETARCH
WORKDIR /src
COPY . .
# Static glibc binaries: crt-static on the gnu target (the explicit --target keeps build scripts
# and proc macros dynamic), in the profile `image` of Cargo.toml, with v0 symbol names as
# .cargo/config.toml asks (RUSTFLAGS replaces its rustflags). The copies are stripped.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    set -eux; \
    case "${TARGETARCH:-amd64}" in \
      amd64) target=x86_64-unknown-linux-gnu ;; \
      arm64) target=aarch64-unknown-linux-gnu ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac; \
    RUSTFLAGS='-C target-feature=+crt-static -C symbol-mangling-version=v0' cargo build --profile image --locked --target "$target" \
      -p kubesteer --bin kubesteer; \
    mkdir -p /out/bin; \
    strip --strip-all -o /out/bin/kubesteer "target/$target/image/kubesteer"; \
    if ldd /out/bin/kubesteer 2>&1 | grep -q '=>'; then echo "kubesteer is dynamically linked" >&2; exit 1; fi; \
    for b in kubesteer-webhook kubesteer-controller kubesteer-certs kubectl-kubesteer; do \
      ln -s kubesteer "/out/bin/$b"; \
      "/out/bin/$b" --help >/dev/null; \
    done

# No shell, no libc, no CA bundle: the binaries are static and trust the apiserver through the
# service account's CA.
FROM scratch
# The workspace version of Cargo.toml, as hack/image.sh stamps it; pass it with --build-arg.
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/kubesteer/kubesteer" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.title="kubesteer" \
      org.opencontainers.image.description="kubesteer: admission webhook (kubesteer-webhook), controller (kubesteer-controller) and certificates tool (kubesteer-certs) for the Scaler, Memcached, Welcome and Application resources"
# One multi-call binary and the four program names as links to it (kubesteer/src/main.rs).
COPY --from=build --chown=0:0 --chmod=0755 /out/bin/ /usr/local/bin/
ENV PATH=/usr/local/bin
USER 65532:65532
WORKDIR /
CMD ["kubesteer-webhook", "--help"]
