# The outbox-relay daemon with every sink, Kafka included:
#
#   docker build -t outbox-relay .        (or `podman build --format docker`, which keeps
#                                          the HEALTHCHECK)
#
# It runs as a non-root user (65532) on a read-only root file system, needs no shell, reads
# its config from /etc/outbox-relay/relay.toml (mount your own there; the one shipped
# serves only /healthz, /readyz and /metrics on 0.0.0.0:9464, which need no token) and its
# database from OUTBOX_DATABASE_URL. The base images are build arguments, so a registry
# mirror or a pinned digest can stand in for them.
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
# librdkafka is built from source (cmake, a C compiler, OpenSSL's and curl's headers).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake g++ make pkg-config libssl-dev libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The commit, for `outbox_build_info{git_sha}` (the build context has no .git).
ARG OUTBOX_RELAY_GIT_SHA=
# The registry and the target directory are caches: a second build compiles what changed.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    OUTBOX_RELAY_GIT_SHA="$OUTBOX_RELAY_GIT_SHA" \
    cargo install --locked --path . --features cli,kafka-sink --root /out \
 && mkdir -p /out/state/outbox-relay

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/bin/outbox-relay /usr/local/bin/outbox-relay
COPY deploy/container/relay.toml /etc/outbox-relay/relay.toml
# The working directory, for a SQLite file (mount a volume here: the root is read-only).
COPY --from=build --chown=65532:65532 /out/state/ /var/lib/
WORKDIR /var/lib/outbox-relay
USER 65532:65532
ENV OUTBOX_CONFIG=/etc/outbox-relay/relay.toml
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
  CMD ["/usr/local/bin/outbox-relay", "probe", "healthz"]
ENTRYPOINT ["/usr/local/bin/outbox-relay"]
CMD ["run"]
