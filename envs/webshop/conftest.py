"""Lets pytest import agentrl_env_webshop from this directory before the package is installed."""
