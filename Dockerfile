# rankflow container image.
#
#   docker build -t rankflow .
#   docker run --rm rankflow check          # validates the bundled example config
#
# The image runs `rankflow run -c /etc/rankflow/rankflow.toml`; every setting
# of that file can be overridden with RANKFLOW_<SECTION>_<KEY> environment
# variables (see docker-compose.yml). Mount your own config over
# /etc/rankflow/rankflow.toml to change the boards.

# ---------------------------------------------------------------------------
# Build stage. rdkafka builds librdkafka from source (configure + make, C)
# against the system OpenSSL (Kafka TLS, SASL_SSL, SCRAM), zstd-sys builds
# zstd with the C compiler, libz-sys links the system zlib.
FROM rust:1-bookworm AS builder

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential pkg-config zlib1g-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /build

# Dependencies first, against stub sources, so editing rankflow's own code
# does not rebuild librdkafka and the crate graph. The [[bench]] targets of
# Cargo.toml must exist for the manifest to load (they are not built here).
COPY Cargo.toml Cargo.lock ./
COPY benches benches
RUN mkdir -p src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked --bin rankflow \
 && rm -rf src

COPY . .
# COPY keeps the context's modification times, which may be older than the
# stub build: touch the crate roots so cargo rebuilds rankflow itself.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin rankflow \
 && install -D -m 0755 target/release/rankflow /out/rankflow

# ---------------------------------------------------------------------------
# Runtime stage: glibc, libgcc and zlib come with the slim image; libssl3
# is librdkafka's TLS (Redis TLS is rustls, linked in).
FROM debian:bookworm-slim

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 rankflow \
 && useradd --system --uid 10001 --gid rankflow --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin rankflow

COPY --from=builder /out/rankflow /usr/local/bin/rankflow
COPY rankflow.toml /etc/rankflow/rankflow.toml

# The example config listens on 127.0.0.1; inside a container the metrics
# and read API must be reachable from other containers.
ENV RANKFLOW_HTTP_LISTEN=0.0.0.0:9898 \
    RANKFLOW_CONFIG=/etc/rankflow/rankflow.toml

USER 10001:10001
EXPOSE 9898

# No HEALTHCHECK here: the slim image has no HTTP client; docker-compose.yml
# probes GET /healthz with bash's /dev/tcp instead.
ENTRYPOINT ["rankflow"]
CMD ["run", "-c", "/etc/rankflow/rankflow.toml"]
