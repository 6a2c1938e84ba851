"""Scrape a real `/metrics` endpoint over HTTP and read samples from it (Prometheus text format)."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(session: aiohttp.ClientSession, url: str, timeout_s: float = 10.0) -> Samples:
    """Every sample at `url`, keyed by (sample name, labels); retried while the endpoint is not up yet."""

    async def read() -> str | None:
        try:
            async with session.get(url) as response:
                assert response.status == 200, response.status
                assert response.content_type == "text/plain", response.content_type
                return await response.text()
        except aiohttp.ClientConnectionError:
            return None

    text = await until(read, timeout_s=timeout_s, interval_s=0.1)
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample `name{labels}` (0 when absent: a counter not yet incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
