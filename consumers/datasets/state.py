"""The export's resume state (the joiner's small state and the certificate) as JSON.

Datasets are shared artifacts: whatever is read back from one must be data, never
code, so the state is never pickled (a crafted pickle in a dataset directory ran on
the next export). `dump` turns the joiner's `state()` plus the certificate into
JSON-ready values; `load` checks the shape and rebuilds them, or raises
`DatasetError` naming what is wrong.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rlmesh_stream.consumers.datasets.manifest import Certificate, DatasetError
from rlmesh_stream.consumers.datasets.model import SessionState

VERSION = 1
_COUNTS = ("exported", "exported_steps", "tagged_caution", "without_terminal_observation",
           "abandoned_exported")


def dump(joiner_state: dict[str, Any], certificate: Certificate) -> dict[str, Any]:
    """JSON-ready values of a joiner's `state()` (its rows JSON-ready already: sessions
    as [ended, failed, caution, totals, exported], pending units as [unit, [[topic,
    partition, offset], ...]]) and the certificate."""
    return {
        "version": VERSION, "sessions": joiner_state["sessions"],
        "first": joiner_state["first"],
        "skipped": dict(joiner_state["skipped"]),
        "skip_examples": dict(joiner_state["skip_examples"]),
        # copies: the store keeps these values as the committed state, the certificate
        # goes on changing
        "certificate": {"producers": {k: {"ranges": list(map(list, v["ranges"])),
                                          "duplicates": v["duplicates"],
                                          "dead_letters": v["dead_letters"]}
                                      for k, v in certificate.producers.items()},
                        "offsets": {k: list(v) for k, v in certificate.offsets.items()},
                        "other": dict(certificate.other),
                        **{k: getattr(certificate, k) for k in _COUNTS}},
    }


def load(data: Any, source: str) -> dict[str, Any]:
    """The joiner state and certificate (under "certificate") from `dump`'s values."""
    try:
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
        sessions = {str(sid): SessionState(bool(v[0]), bool(v[1]), bool(v[2]), None,
                                           (int(v[3][0]), int(v[3][1])) if v[3] else None,
                                           int(v[4]))
                    for sid, v in data["sessions"].items()}
        first = {tuple(str(x) for x in unit): {(str(t), int(p)): int(o) for t, p, o in where}
                 for unit, where in data["first"]}
        cert = data["certificate"]
        certificate = Certificate(
            producers={str(k): {"ranges": [[int(a), int(b)] for a, b in v["ranges"]],
                                "duplicates": int(v["duplicates"]),
                                "dead_letters": int(v["dead_letters"])}
                       for k, v in cert["producers"].items()},
            offsets={str(k): [int(a), int(b)] for k, (a, b) in cert["offsets"].items()},
            # absent from a state written before producers were capped
            other={k: int(cert.get("other", {}).get(k, 0)) for k in ("records", "dead_letters")})
        for k in _COUNTS:
            setattr(certificate, k, int(cert[k]))
        return {"sessions": sessions, "first": first,
                "skipped": Counter({str(k): int(v) for k, v in data["skipped"].items()}),
                "skip_examples": {str(k): str(v) for k, v in data["skip_examples"].items()},
                "certificate": certificate}
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise DatasetError(f"{source} is not a valid export state ({type(exc).__name__}: "
                           f"{exc}); remove the dataset and export again") from None
