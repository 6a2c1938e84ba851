"""The chart's alert rules evaluated by Prometheus's own `promtool test rules` over series scraped from real processes.

`promtool` is the user's own (`MCPTASKS_PROMTOOL`, `PATH`; Prometheus 3.x), else built from Go modules by
`tests/alerts/build.sh` (cached in ~/.cache/mcp-tasks). Tests that need it skip with the reason when there is
none, unless `MCPTASKS_REQUIRE_CONTROL_PLANE=1` (CI) turns that into a failure.

Scraped samples become a `promtool test rules` input: every series of two scrapes (`Scrape`) continues
linearly at the rate it moved between them (a refreshed timestamp keeps advancing, a stale one stays), with the
target labels a ServiceMonitor scrape adds (`namespace`, `container`, `pod`). Unix-time series
(`*_timestamp_seconds`, Prometheus' naming rule) are shifted so that promtool's time 0, where its `time()`
starts, is the moment of the second scrape.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import binaries
from tests.metrics import Samples

STEP_S = 60
"""Interval of the generated input series and of promtool's rule evaluation, in seconds."""


class PromtoolUnavailable(Exception):
    """No `promtool` here, or one of another version; the message says which is needed and how to build it."""


def promtool_binary() -> Path:
    """`promtool`: `MCPTASKS_PROMTOOL`, `PATH`, else what `tests/alerts/build.sh` built (`tests/binaries.py`).

    Raises:
        PromtoolUnavailable: none, or of another version (the message says which is needed and how to build it).
    """
    try:
        return binaries.find("promtool")
    except binaries.BinaryUnavailable as exc:
        raise PromtoolUnavailable(f"the alert tests cannot run: {exc}") from exc


def promtool_or_skip() -> Path:
    """`promtool_binary()`, or skip the test saying why (fail instead under `MCPTASKS_REQUIRE_CONTROL_PLANE=1`)."""
    try:
        return promtool_binary()
    except PromtoolUnavailable as exc:
        if os.environ.get("MCPTASKS_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@dataclass(frozen=True, slots=True)
class Scrape:
    """Two scrapes of one target (`first` then `second`, at Unix times `first_at_s` and `second_at_s`) and
    the labels a Prometheus scrape of it would add."""

    target: dict[str, str]
    first: Samples
    first_at_s: float
    second: Samples
    second_at_s: float


def _selector(name: str, labels: dict[str, str]) -> str:
    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return name + "{" + ", ".join(f"{key}={quoted(value)}" for key, value in sorted(labels.items())) + "}"


def input_series(scrapes: list[Scrape], steps: int) -> list[dict[str, str]]:
    """promtool `input_series` for `steps` evaluation steps from the `mcptasks_*` samples of `scrapes`.

    Each series starts at its second-scrape value and moves by its observed rate per `STEP_S`.
    """
    series: list[dict[str, str]] = []
    for scrape in scrapes:
        elapsed_s = scrape.second_at_s - scrape.first_at_s
        assert elapsed_s > 0
        for (name, labels), value in sorted(scrape.second.items(), key=lambda item: (item[0][0], sorted(item[0][1]))):
            if not name.startswith("mcptasks_"):
                continue
            before = scrape.first.get((name, labels), value)
            per_step = (value - before) / elapsed_s * STEP_S
            start = value - scrape.second_at_s if name.endswith("_timestamp_seconds") else value
            series.append(
                {
                    "series": _selector(name, {**dict(labels), **scrape.target}),
                    "values": f"{start:.3f}{per_step:+.3f}x{steps}",
                }
            )
    return series


def run_rule_tests(promtool: Path, groups: list[Any], tests: list[dict[str, Any]], folder: Path) -> str:
    """Write the rule `groups` and the `tests` and run `promtool test rules`; its output.

    Raises:
        AssertionError: promtool reported a failed test (its output says which and why).
    """
    (folder / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    config = {"rule_files": ["rules.yaml"], "evaluation_interval": f"{STEP_S}s", "tests": tests}
    (folder / "tests.yaml").write_text(yaml.safe_dump(config, sort_keys=False, width=400))
    result = subprocess.run(
        [str(promtool), "test", "rules", "tests.yaml"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout
