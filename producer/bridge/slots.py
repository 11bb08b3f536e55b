"""What rlmesh's thread keeps for a run: the leaf codecs and each episode's lane slot.

A vector env's `StepEvent` carries no lane, so episodes are attributed to lane slots in
start order: an episode takes the lowest free slot and frees it when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlmesh_stream.producer.leaves import LeafCodec


@dataclass
class Capture:
    """What rlmesh's thread keeps for a run: the codecs and the episodes' lane slots."""

    context: Any = None
    values_are_fresh: bool = False  # the SDK's values are the hooks' own: no snapshot needed
    obs_codec: LeafCodec | None = None
    act_codec: LeafCodec | None = None
    slots: dict[int, int] = field(default_factory=dict)  # episode index -> lane slot
    free_slots: list[int] = field(default_factory=list)
    next_slot: int = 0

    def take_slot(self, episode: int) -> int:
        if self.free_slots:
            slot = self.free_slots.pop(0)
        else:
            slot = self.next_slot
            self.next_slot += 1
        self.slots[episode] = slot
        return slot

    def free_slot(self, episode: int) -> int | None:
        slot = self.slots.pop(episode, None)
        if slot is not None:
            self.free_slots.append(slot)
            self.free_slots.sort()
        return slot
