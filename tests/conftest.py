"""Shared setup of the project's own tests (not of the deployment suite)."""

pytest_plugins = ["pytester"]
