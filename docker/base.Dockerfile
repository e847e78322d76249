# A registry-based equivalent of agentrl/base, for hosts that can pull images: the same Debian
# release and the tools AgentBench's OS images have. Here, `agentrl-envs build` imports the
# debootstrapped root filesystem instead (agentrl_envs/sandbox/rootfs.py), no pull needed.
#   docker build -t agentrl/base:latest -f docker/base.Dockerfile docker
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-pip git vim-tiny curl wget unzip zip tree ca-certificates procps psmisc file less bc \
        sudo lsof iproute2 bsdextrautils perl gawk xz-utils bzip2 \
    && rm -rf /var/lib/apt/lists/*
ENV LANG=C.UTF-8
CMD ["/bin/bash"]
