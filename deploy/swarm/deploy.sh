#!/usr/bin/env bash
# deploy/swarm/deploy.sh up|down [STACK]: deploy deploy/swarm/stack.yml as a Docker Swarm stack
# (default name: $AGENTRL_STACK or agentrl) and wait until the controller lists a live worker for
# every task with replicas; or remove the stack and wait until its containers are gone.
#
# Needs a swarm manager (`docker swarm init --advertise-addr ADDR`) and the images
# (`agentrl-envs build db os`). The variables of stack.yml (AGENTRL_CONTROLLER_PORT,
# AGENTRL_*_IMAGE, AGENTRL_*_REPLICAS, AGENTRL_NETWORK) pass through; so do AGENTRL_CLIENT_TOKEN
# and AGENTRL_WORKER_SECRET, which `up` generates and prints (on stderr) when they are unset
# (the services listen beyond loopback, so the controller requires them); AGENTRL_WAIT_S bounds
# each wait (default 180 s). Exit status: 0 ready / removed, 1 on a timeout (with the
# stack's task list).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
action=${1:-}
stack=${2:-${AGENTRL_STACK:-agentrl}}
port=${AGENTRL_CONTROLLER_PORT:-5020}
wait_s=${AGENTRL_WAIT_S:-180}

tasks_with_replicas() {
    [ "${AGENTRL_ECHO_REPLICAS:-1}" != 0 ] && echo echo
    [ "${AGENTRL_DB_REPLICAS:-1}" != 0 ] && echo db
    [ "${AGENTRL_OS_REPLICAS:-1}" != 0 ] && echo os
    return 0
}

case "$action" in
up)
    if [ "$(docker info --format '{{.Swarm.ControlAvailable}}')" != true ]; then
        echo "this engine is not a swarm manager: run docker swarm init --advertise-addr ADDR" >&2
        exit 1
    fi
    for var in AGENTRL_CLIENT_TOKEN AGENTRL_WORKER_SECRET; do
        if [ -z "${!var:-}" ]; then
            export "$var=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
            echo "generated: export $var=${!var}" >&2
        fi
    done
    detach=()
    # Newer clients wait for convergence by default; older ones have no --detach at all.
    if docker stack deploy --help 2>&1 | grep -q -- --detach; then detach=(--detach=true); fi
    docker stack deploy "${detach[@]}" -c "$here/stack.yml" "$stack"
    url="http://127.0.0.1:$port/health"
    want=$(tasks_with_replicas)
    missing=" $want"
    for ((i = 0; i < wait_s; i++)); do
        # /health: {"status": "ok", "live_workers": {"echo": 1, ...}, "sessions": 0}
        if health=$(curl -fsS --max-time 2 "$url" 2>/dev/null); then
            missing=$(python3 -c 'import json, sys
live = json.loads(sys.argv[1]).get("live_workers", {})
print(" ".join(t for t in sys.argv[2:] if not live.get(t)))' "$health" $want)
        fi
        if [ -z "$missing" ]; then
            echo "stack $stack ready: controller http://127.0.0.1:$port, workers for:" $want
            exit 0
        fi
        sleep 1
    done
    echo "stack $stack not ready after $wait_s s (no live worker for: $missing):" >&2
    docker stack ps --no-trunc "$stack" >&2 || true
    exit 1
    ;;
down)
    docker stack rm "$stack"
    for ((i = 0; i < wait_s; i++)); do
        if [ -z "$(docker ps -aq --filter "label=com.docker.stack.namespace=$stack")" ]; then
            echo "stack $stack removed"
            exit 0
        fi
        sleep 1
    done
    echo "containers of stack $stack still there after $wait_s s" >&2
    exit 1
    ;;
*)
    echo "usage: $0 up|down [STACK]" >&2
    exit 2
    ;;
esac
