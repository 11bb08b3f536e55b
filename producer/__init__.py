"""The publishing side: a RuntimeHooks observer that streams rlmesh runtime events to Kafka.

Names are loaded lazily so `producer.manifest` (imported by the consumers'
tests) does not pull in librdkafka, numpy or rlmesh.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from producer.bridge import RlmeshBridge, rlmesh_bridge
    from producer.config import DeliveryFailure, ProducerSettings
    from producer.delivery import Stats
    from producer.hooks import KafkaRuntimeHooks
    from producer.manifest import Manifest
    from producer.simulator import simulate_fleet

_EXPORTS = {
    "KafkaRuntimeHooks": "producer.hooks",
    "ProducerSettings": "producer.config",
    "DeliveryFailure": "producer.config",
    "Stats": "producer.delivery",
    "RlmeshBridge": "producer.bridge",
    "rlmesh_bridge": "producer.bridge",
    "Manifest": "producer.manifest",
    "simulate_fleet": "producer.simulator",
}

__all__ = [
    "DeliveryFailure",
    "KafkaRuntimeHooks",
    "Manifest",
    "ProducerSettings",
    "RlmeshBridge",
    "Stats",
    "rlmesh_bridge",
    "simulate_fleet",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'producer' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
