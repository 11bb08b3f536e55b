"""The publishing side: a RuntimeHooks observer that streams rlmesh runtime events to Kafka.

Names are loaded lazily so `rlmesh_stream.producer.manifest` (imported by the consumers'
tests) does not pull in librdkafka, numpy or rlmesh.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlmesh_stream.producer.bridge import RlmeshBridge, rlmesh_bridge
    from rlmesh_stream.producer.config import DeliveryFailure, ProducerSettings
    from rlmesh_stream.producer.delivery import Stats
    from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
    from rlmesh_stream.producer.manifest import Manifest
    from rlmesh_stream.producer.simulator import simulate_fleet

_EXPORTS = {
    "KafkaRuntimeHooks": "rlmesh_stream.producer.hooks",
    "ProducerSettings": "rlmesh_stream.producer.config",
    "DeliveryFailure": "rlmesh_stream.producer.config",
    "Stats": "rlmesh_stream.producer.delivery",
    "RlmeshBridge": "rlmesh_stream.producer.bridge",
    "rlmesh_bridge": "rlmesh_stream.producer.bridge",
    "Manifest": "rlmesh_stream.producer.manifest",
    "simulate_fleet": "rlmesh_stream.producer.simulator",
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
