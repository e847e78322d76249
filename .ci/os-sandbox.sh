#!/usr/bin/env bash
# Set up the OS task's bubblewrap sandbox: install bubblewrap + debootstrap, build the Debian
# root filesystem (cached; a second run is a no-op), and print `export AGENTRL_ROOTFS=<path>` as
# the last line:   eval "$(.ci/os-sandbox.sh | tail -n1)"
# Needs root (apt, debootstrap, and the sandbox's overlay mounts and cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if ! command -v bwrap >/dev/null || ! command -v debootstrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  apt-get install -y bubblewrap debootstrap >&2
fi
"$PY" -m pip install -q --no-deps -e envs/os >&2
path=$("$PY" -m agentrl_envs.sandbox.rootfs)
echo "export AGENTRL_ROOTFS=$path"
