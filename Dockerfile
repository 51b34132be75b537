# dronelab in one image: gateway, delivery-service, package-service,
# utilization-service, cosmos-emulator, trace-viewer and loadtest, each in
# /usr/local/bin; every Kubernetes workload picks its binary with `command`.
#
#   docker build -t dronelab:0.1.0 .        podman build -t dronelab:0.1.0 .
#
# Base images are build arguments, so a mirror or a base made locally can stand in.
ARG RUST_IMAGE=docker.io/library/rust:1.89-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS compile
WORKDIR /src
COPY . .
# The caches keep crates and build output between builds; symbols are stripped to keep
# the image small. The services' default feature `tls` (https to Azure Cosmos DB) holds
# for every binary of this one build, loadtest's too. The profile is `dist`: release
# with thin LTO, what `bench/run` measures (Cargo.toml says why and what it gains).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_DIST_STRIP=symbols cargo build --profile dist --locked \
      --bin gateway --bin delivery-service --bin package-service \
      --bin utilization-service --bin cosmos-emulator --bin trace-viewer --bin loadtest \
 && mkdir /out \
 && cd target/dist \
 && cp gateway delivery-service package-service utilization-service \
       cosmos-emulator trace-viewer loadtest /out/

# Distroless `cc`: glibc, libgcc, CA certificates and a non-root user; no shell.
FROM ${RUNTIME_IMAGE} AS runtime
USER 65532:65532
EXPOSE 8080 8081 8091 8092 8093 16686 4317 4318
CMD ["gateway"]
LABEL org.opencontainers.image.title="dronelab" \
      org.opencontainers.image.description="Performance tuning lab for a gateway that aggregates several backends" \
      org.opencontainers.image.licenses="MIT"

# `--target prebuilt`: the same runtime with binaries built elsewhere by the same
# `cargo build --profile dist --locked`, from a build context holding bin/<binary>.
# dronelab's podman test builds this on machines that cannot pull the Rust image.
FROM runtime AS prebuilt
COPY bin/ /usr/local/bin/

# The default: the binaries compiled above.
FROM runtime
COPY --from=compile /out/ /usr/local/bin/
