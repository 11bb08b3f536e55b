"""The builders, by the name `rlmesh-stream consume <name>` takes."""

from __future__ import annotations

from datetime import timedelta

from rlmesh_stream.consumers.builders.advisories import AdvisoriesBuilder
from rlmesh_stream.consumers.builders.base import Builder, Reduced, reduce
from rlmesh_stream.consumers.builders.delivery import DeliveryBuilder
from rlmesh_stream.consumers.builders.episodes import EpisodesBuilder, EpisodesWithStepsBuilder
from rlmesh_stream.consumers.builders.sessions import SessionsBuilder
from rlmesh_stream.consumers.builders.telemetry import DEFAULT_WINDOW, TelemetryBuilder

BUILDER_NAMES = ("episodes", "sessions", "advisories", "telemetry", "delivery")


def make_builders(
    names: list[str] | tuple[str, ...], *, steps: bool = False,
    window: timedelta = DEFAULT_WINDOW,
) -> list[Builder]:
    """Builders by name; `all` is every builder in one process."""
    wanted = list(BUILDER_NAMES) if "all" in names else list(names)
    out: list[Builder] = []
    for name in wanted:
        if name == "episodes":
            out.append(EpisodesWithStepsBuilder() if steps else EpisodesBuilder())
        elif name == "sessions":
            out.append(SessionsBuilder())
        elif name == "advisories":
            out.append(AdvisoriesBuilder())
        elif name == "telemetry":
            out.append(TelemetryBuilder(window))
        elif name == "delivery":
            out.append(DeliveryBuilder())
        else:
            raise ValueError(f"unknown builder {name!r}")
    return out


__all__ = [
    "BUILDER_NAMES", "AdvisoriesBuilder", "Builder", "DeliveryBuilder", "EpisodesBuilder",
    "EpisodesWithStepsBuilder", "Reduced", "SessionsBuilder", "TelemetryBuilder",
    "make_builders", "reduce",
]
