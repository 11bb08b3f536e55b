"""What a simulated fleet emitted: the ground truth tables are checked against.

Deliberately dependency-free (standard library only) so the consumers'
tests can import it without pulling in the producer's Kafka machinery.
JSON round-trips with `Manifest.to_json` / `Manifest.from_json`.

Rewards are multiples of 1/4, so sums are exact in binary floating point
whatever order a consumer adds them in.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class EpisodeManifest:
    """One episode: the global key is (session_id, episode_record_id)."""

    session_id: str
    episode_record_id: str
    episode_id: str
    episode_index: int
    env_index: int
    steps: int
    reward: float
    # "terminated" / "truncated": completed (an episode_completed was emitted);
    # "aborted": still running when its session failed (no episode_completed).
    status: str
    seed: int | None = None
    trial_index: int | None = None
    success: bool | None = None
    started_from_auto_reset: bool = False


@dataclass
class AdvisoryManifest:
    leg: str  # "observation" / "action"
    severity: str  # "info" / "caution"
    message: str


@dataclass
class SessionManifest:
    session_id: str
    env_id: str
    env_component_id: str
    model_component_id: str
    lane: int | None
    num_envs: int
    autoreset: str  # "next_step" (runtime-owned rolls) or "driver"
    status: str  # "ended" / "failed"
    reason: str
    total_steps: int  # real (non-roll) lane steps
    group_steps: int  # step_completed events
    total_episodes: int  # completed episodes
    advisories: list[AdvisoryManifest] = field(default_factory=list)
    window_snapshots: int = 0
    window_rows: int = 0
    session_rows: int = 0
    logs: int = 0


@dataclass
class Manifest:
    seed: int
    sessions: list[SessionManifest] = field(default_factory=list)
    episodes: list[EpisodeManifest] = field(default_factory=list)
    event_counts: dict[str, int] = field(default_factory=dict)  # event type -> events emitted

    @property
    def total_events(self) -> int:
        return sum(self.event_counts.values())

    def completed_episodes(self) -> list[EpisodeManifest]:
        return [e for e in self.episodes if e.status != "aborted"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        sessions = [
            SessionManifest(**{**s, "advisories": [AdvisoryManifest(**a)
                                                   for a in s.get("advisories", [])]})
            for s in data.get("sessions", [])
        ]
        episodes = [EpisodeManifest(**e) for e in data.get("episodes", [])]
        return cls(seed=data["seed"], sessions=sessions, episodes=episodes,
                   event_counts=dict(data.get("event_counts", {})))

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        return cls.from_dict(json.loads(text))

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Manifest:
        return cls.from_json(Path(path).read_text())
