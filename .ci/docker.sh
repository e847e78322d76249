#!/usr/bin/env bash
# Install (if needed) and start a local Docker engine for the `docker` tests and
# `agentrl-envs build` / `up --backend docker`.
#
# Idempotent: safe to run twice; a daemon that already answers `docker info` is reused.
# Run as root on Debian/Ubuntu. The engine runs without iptables and without the default bridge
# (this machine has neither): containers use `--network none` or `--network host`.
# Log: ${DOCKERD_LOG:-/tmp/dockerd.log}. Prints nothing on stdout (everything goes to stderr).
set -euo pipefail
exec 1>&2

LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"
log() { echo "[docker.sh] $*" >&2; }

if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >&2
fi

if ! docker info >/dev/null 2>&1; then
    log "starting dockerd (log: ${LOG})"
    nohup dockerd --iptables=false --ip6tables=false --bridge=none >"${LOG}" 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { log "dockerd did not answer within 60 s; see ${LOG}"; tail -n 20 "${LOG}" >&2; exit 1; }
fi
log "docker engine $(docker version --format '{{.Server.Version}}') is up"
