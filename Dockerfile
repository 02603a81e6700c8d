# syntax=docker/dockerfile:1
#
# znippy: the CLI and the HTTP service (`znippy serve`) in one small image.
#
#   docker build -t znippy .
#   docker run -e ZNIPPY_TOKEN=... -v znippy-data:/data -p 7878:7878 znippy
#
# The service refuses to listen beyond loopback without a token, so give one
# (ZNIPPY_TOKEN, or --token) or it exits at start; see docs/http.md. The
# docker-compose.yml next to this file runs it with a query engine.
#
# Not built on the machine this was written on (no Docker there): checked by
# reading only.

FROM rust:1-bookworm AS build
WORKDIR /src
# The whole workspace: every member must be present for Cargo to load it, and
# crates/http embeds docs/openapi.json at compile time.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    ./scripts/build --release --locked \
 && install -m 0755 target/release/znippy target/release/znippy-server /usr/local/bin/

FROM debian:bookworm-slim
# curl is only for the health check (HEALTHCHECK below and docker-compose.yml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin znippy \
 && mkdir /data \
 && chown znippy:znippy /data
# `znippy serve` hands over to znippy-server, found beside it.
COPY --from=build /usr/local/bin/znippy /usr/local/bin/znippy-server /usr/local/bin/
USER znippy
WORKDIR /data
# A new named volume takes this directory's owner, so the service can write it.
VOLUME /data
EXPOSE 7878
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=5 \
    CMD curl -fsS http://127.0.0.1:7878/healthz || exit 1
# SIGTERM (docker stop) stops accepting, lets appends in flight commit, exits.
CMD ["znippy","serve","--data","/data","--listen","0.0.0.0:7878"]
