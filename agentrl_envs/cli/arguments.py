"""Argument groups several ``agentrl-envs`` commands share."""

from __future__ import annotations

import argparse


def server_args(sp: argparse.ArgumentParser, port: int) -> None:
    """Where and how a server listens: address, log level, the worker secret, TLS."""
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=port)
    sp.add_argument(
        "--fd",
        type=int,
        help="serve on this inherited, already listening socket (--host/--port then only name it in URLs)",
    )
    sp.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    sp.add_argument(
        "--worker-secret",
        help="the secret between controller and workers (prefer the environment: AGENTRL_WORKER_SECRET; "
        "a command line is visible to other users of the host)",
    )
    sp.add_argument("--insecure", action="store_true", help="serve beyond loopback without authentication (not recommended)")
    sp.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM; with --ssl-keyfile)")
    sp.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")
    sp.add_argument(
        "--ca-file", help="CA bundle (PEM) that verifies the other side's HTTPS certificate (default: the system store)"
    )


def data_args(sp: argparse.ArgumentParser) -> None:
    """Which samples a task serves (``--split`` or ``--data``) and its options (``--option``)."""
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--split", help="a split the task ships (see `agentrl-envs list`)")
    g.add_argument("--data", help="a data file or directory in the task's format")
    sp.add_argument("--option", action="append", metavar="KEY=VALUE", help="task option, repeatable")
