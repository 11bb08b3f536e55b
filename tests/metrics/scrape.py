"""Scraping a /metrics endpoint over HTTP and reading it with prometheus_client's parser."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(port: int) -> Samples:
    """Every sample of the endpoint, by sample name (`..._total` for counters)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    found = [v for got, v in samples.get(name, []) if _matches(got, labels)]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for got, v in samples.get(name, []) if _matches(got, labels))


def _matches(got: Mapping[str, str], want: Mapping[str, str]) -> bool:
    return all(got.get(k) == v for k, v in want.items())
