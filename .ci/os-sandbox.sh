#!/usr/bin/env bash
# Set up the OS task's bubblewrap sandbox: install bubblewrap + debootstrap, build the Debian
# root filesystem (cached; a second run is a no-op), and print `export AGENTRL_ROOTFS=<path>`:
#   eval "$(.ci/os-sandbox.sh)"      (or, as before, `| tail -n1`)
# Its stdout carries exactly that one line: everything else (apt, pip, debootstrap) goes to stderr.
# Needs root (apt, debootstrap, and the sandbox's overlay mounts and cgroups).
set -euo pipefail
# fd 3 is the real stdout, kept for the export line; every command's stdout goes to stderr.
exec 3>&1 1>&2
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if ! command -v bwrap >/dev/null || ! command -v debootstrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y bubblewrap debootstrap
fi
"$PY" -m pip install -q --no-deps -e envs/os
# The module prints only the path on its stdout (the build's log goes to stderr).
path=$("$PY" -m agentrl_envs.sandbox.rootfs)
if [[ $path != /* || $path == *$'\n'* ]]; then
  echo "os-sandbox.sh: expected one absolute path from agentrl_envs.sandbox.rootfs, got: $path"
  exit 1
fi
printf 'export AGENTRL_ROOTFS=%q\n' "$path" >&3
