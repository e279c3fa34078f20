"""Client for the Factory Memory agent API. Needs only httpx; never imports Django."""

from factory_client.client import FactoryClient, FactoryError

__all__ = ["FactoryClient", "FactoryError"]
