"""Fixtures of the CLI tests: a private trace service (``service``, ``service_env``)."""

from tests.service.harness import service, service_env  # noqa: F401 - fixtures
