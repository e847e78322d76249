# The controller. Workers anywhere join it by pointing --controller at http://THIS_HOST:PORT/api.
#
# Build context: a directory holding wheels/ with agentrl_envs-*.whl (plus its dependencies and
# --build-arg PIP_INSTALL_ARGS=--no-index for an offline build).
#   Here (no registry):  agentrl-envs build               FROM the locally imported agentrl/base
#   Elsewhere:           pip wheel --no-deps -w ctx/wheels . && cp docker/controller.Dockerfile ctx/Dockerfile &&
#                        docker build --build-arg BASE_IMAGE=python:3.11-slim -t agentrl/controller ctx
# Run: docker run --network host -e PORT=5020 agentrl/controller   (extra arguments go to
#   `agentrl-envs controller`, e.g. --heartbeat-timeout 11)
ARG BASE_IMAGE=agentrl/base:latest
FROM ${BASE_IMAGE}
ARG PIP_INSTALL_ARGS=""
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
COPY wheels/ /tmp/wheels/
RUN python3 -m pip install -q ${PIP_INSTALL_ARGS} --find-links /tmp/wheels /tmp/wheels/agentrl_envs-*.whl \
    && rm -rf /tmp/wheels
ENV HOST=0.0.0.0 PORT=5020
EXPOSE 5020
HEALTHCHECK --interval=3s --timeout=3s --start-period=60s --retries=3 \
    CMD python3 -c "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/health' % os.environ['PORT'], timeout=2)"
ENTRYPOINT ["/bin/sh", "-c", "exec agentrl-envs controller --host \"$HOST\" --port \"$PORT\" \"$@\"", "controller"]
