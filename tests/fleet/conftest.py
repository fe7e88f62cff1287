"""The fleet tests' fixtures (a JetStream cluster per test)."""

from tests.fleet.harness import nats_cluster

__all__ = ["nats_cluster"]
