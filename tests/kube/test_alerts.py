"""The shipped PrometheusRule, evaluated by `promtool test rules` over `/metrics` scraped from real operators and
a real gateway on the test control plane (issue 21 item 5: alerts that fire).

Two deployments run side by side: a healthy one (two operator replicas, one leading and sweeping) and one where
no replica reconciles (two replicas; the one that led and swept lost the Lease to a holder that is neither, so
both stand by). Both are scraped twice, a few sweeps apart; `tests/alerts/rules.py` turns the scrapes into
promtool input series.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from mcp_tasks.operator.leadership import micro_time
from mcp_tasks.tasks.interfaces import utc_now
from tests.alerts.rules import Scrape, input_series, promtool_or_skip, run_rule_tests
from tests.controlplane.cluster import REPO, ControlPlane, free_port, wait_until
from tests.kube.conftest import Operators, until
from tests.kube.test_operator import LEASE, kube_json, until_leads
from tests.kube.test_rbac import CHART
from tests.metrics import Samples, scrape, value

RELEASE_NAMESPACE = "mcp"
"""The namespace the rule is rendered for, and the `namespace` target label of every scraped series."""
ALERT = "McpTasksOperatorNotReconciling"
OPERATOR_ONLY = (
    "mcptasks_sweep_timestamp_seconds",
    "mcptasks_operator_leader",
    "mcptasks_jobs_created_total",
    "mcptasks_reconcile_queue_depth",
    "mcptasks_unfinished_task_max_age_seconds",
)


def alert_groups(plane: ControlPlane, *values: str) -> list[Any]:
    """`spec.groups` of the chart's PrometheusRule, as `helm template` renders it with `values` (helm flags)."""
    rendered = plane.helm(
        "template",
        "r",
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--show-only",
        "templates/monitoring.yaml",
        "--set",
        "auth.existingSecret=tokens",
        "--set",
        "metrics.prometheusRule.enabled=true",
        *values,
    )
    rule = next(doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "PrometheusRule")
    groups: list[Any] = rule["spec"]["groups"]
    return groups


def take_lease(plane: ControlPlane, namespace: str) -> bool:
    """Give the operators' Lease to a holder that is none of them, for an hour (False on a write conflict)."""
    lease = kube_json(plane, namespace, "lease", LEASE)
    lease["spec"].update(holderIdentity="maintenance", leaseDurationSeconds=3600, renewTime=micro_time(utc_now()))
    try:
        plane.kubectl("replace", "-f", "-", input_text=json.dumps(lease))
    except subprocess.CalledProcessError:
        return False
    return True


def start_gateway(
    plane: ControlPlane, namespace: str, folder: Path, metrics_port: int
) -> tuple[subprocess.Popen[bytes], str]:
    """`mcptasks gateway` as its own process (so its `/metrics` holds only what a gateway registers), and its
    MCP URL."""
    log = folder / "gateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcp_tasks.cli",
                "gateway",
                "--kubeconfig",
                str(plane.kubeconfig),
                "--namespace",
                namespace,
                "--port",
                "0",
                "--metrics-port",
                str(metrics_port),
                "--data-dir",
                str(folder),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    wait_until(lambda: b"Prometheus metrics on" in log.read_bytes(), 60, lambda: log.read_text(errors="replace"), 0.1)
    banner = next(line for line in log.read_text().splitlines() if "serving MCP on" in line)
    return process, banner.split("serving MCP on ", 1)[1].split(" ", 1)[0]


def test_the_failing_alert_summary_names_its_threshold_in_percent(control_plane: ControlPlane) -> None:
    """`failureRatio` is a fraction; the summary shows it as a percentage, fractional ones included."""
    for ratio, shown in (("0.125", "12.5%"), ("0.2", "20%")):
        groups = alert_groups(control_plane, "--set-json", f"metrics.prometheusRule.failureRatio={ratio}")
        failing = next(rule for group in groups for rule in group["rules"] if rule.get("alert") == "McpTasksFailing")
        assert f"fails more than {shown} of its tasks" in failing["annotations"]["summary"], failing["annotations"]


def finished_total(tool: str, status: str, per_minute: int) -> dict[str, str]:
    """A promtool input series of `mcptasks_tasks_finished_total` for `tool` and `status`, rising `per_minute` a
    minute for an hour (the rule's `rate(...[15m])` sees that rate after the first minute)."""
    labels = f'namespace="{RELEASE_NAMESPACE}", status="{status}", tool="{tool}"'
    return {"series": f"mcptasks_tasks_finished_total{{{labels}}}", "values": f"0+{per_minute}x60"}


def test_the_failing_alert_summary_prometheus_renders_shows_the_threshold_in_percent(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """Issue 31 item 6: the summary as Prometheus renders it when `McpTasksFailing` fires, compared whole by
    promtool's `exp_annotations`: the threshold in percent ("10%" for `failureRatio` 0.1; `mul` on the fraction
    rendered "0%"), the tool's name from the series. A tool failing 20% of its tasks fires after `for: 15m`, one
    failing 5% never does."""
    promtool = promtool_or_skip()
    for ratio, shown in (("0.1", "10%"), ("0.125", "12.5%")):
        groups = alert_groups(control_plane, "--set-json", f"metrics.prometheusRule.failureRatio={ratio}")
        rule = next(rule for group in groups for rule in group["rules"] if rule.get("alert") == "McpTasksFailing")
        fired = {
            "exp_labels": {"severity": "warning", "tool": "flaky"},
            "exp_annotations": {
                "summary": f"Tool flaky fails more than {shown} of its tasks",
                "description": rule["annotations"]["description"],
            },
        }
        series = [
            finished_total("flaky", "failed", 2),
            finished_total("flaky", "completed", 8),
            finished_total("steady", "failed", 1),
            finished_total("steady", "completed", 19),
        ]
        tests = [
            {
                "name": f"failureRatio {ratio}",
                "interval": "60s",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": "McpTasksFailing", "exp_alerts": []},  # pending, not firing
                    {"eval_time": "40m", "alertname": "McpTasksFailing", "exp_alerts": [fired]},
                ],
            }
        ]
        folder = tmp_path / ratio
        folder.mkdir()
        run_rule_tests(promtool, groups, tests, folder)


async def test_the_operator_not_reconciling_alert_fires_only_when_no_replica_reconciles(
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Our choice (issue 21 item 5): the liveness series moves only where tasks are reconciled, so a live standby
    no longer hides a leader that stopped; gateways export no operator family."""
    promtool = promtool_or_skip()
    healthy = [free_port(), free_port()]
    operators.start("--metrics-port", str(healthy[0]), worker_port=free_port())
    await until_leads(http_session, healthy[0], timeout_s=60)
    operators.start("--metrics-port", str(healthy[1]))

    other = f"t-{secrets.token_hex(4)}"
    control_plane.kubectl("create", "namespace", other)
    (tmp_path / "other").mkdir()
    stalled = Operators(control_plane, other, tmp_path / "other")
    gateway: subprocess.Popen[bytes] | None = None
    try:
        idle = [free_port(), free_port()]
        stalled.start("--metrics-port", str(idle[0]), worker_port=free_port())
        await until_leads(http_session, idle[0], timeout_s=60)

        async def swept() -> bool:
            samples = await scrape(http_session, f"http://127.0.0.1:{idle[0]}/metrics")
            return value(samples, "mcptasks_sweep_timestamp_seconds") > 0

        await until(swept)
        stalled.start("--metrics-port", str(idle[1]), worker_port=free_port())
        await until(lambda: take_lease(control_plane, other))

        async def none_leads() -> bool:
            gauges = [
                value(await scrape(http_session, f"http://127.0.0.1:{port}/metrics"), "mcptasks_operator_leader")
                for port in idle
            ]
            return gauges == [0.0, 0.0]

        await until(none_leads)
        gateway_metrics = free_port()
        gateway, url = start_gateway(control_plane, namespace, tmp_path, gateway_metrics)
        async with http_session.post(url, data="{", headers={"Content-Type": "application/json"}) as refused:
            assert refused.status == 400  # counted by the gateway as a parse error (-32700)

        targets = {
            "healthy": [(port, {"container": "operator", "pod": f"operator-{i}"}) for i, port in enumerate(healthy)]
            + [(gateway_metrics, {"container": "gateway", "pod": "gateway-0"})],
            "stalled": [(port, {"container": "operator", "pod": f"operator-{i}"}) for i, port in enumerate(idle)],
        }

        async def scrape_all() -> tuple[dict[int, Samples], float]:
            ports = [port for group in targets.values() for port, _ in group]
            samples = {port: await scrape(http_session, f"http://127.0.0.1:{port}/metrics") for port in ports}
            return samples, time.time()

        first, first_at_s = await scrape_all()
        leader = max(healthy, key=lambda port: value(first[port], "mcptasks_operator_leader"))
        start_s = value(first[leader], "mcptasks_sweep_timestamp_seconds")

        async def ten_sweeps_later() -> bool:  # the healthy leader's own sweeps are the clock (1 s apart here)
            samples = await scrape(http_session, f"http://127.0.0.1:{leader}/metrics")
            return value(samples, "mcptasks_sweep_timestamp_seconds") >= start_s + 10

        await until(ten_sweeps_later)
        second, second_at_s = await scrape_all()
    finally:
        stalled.stop_all()
        if gateway is not None:
            gateway.terminate()
            gateway.wait(timeout=30)

    gateway_names = {name for name, _ in second[gateway_metrics]}
    assert not gateway_names & set(OPERATOR_ONLY), "a gateway exports no operator family"
    assert any(name.startswith("mcptasks_") for name in gateway_names), "but its own"

    def scrapes(case: str) -> list[Scrape]:
        return [
            Scrape({"namespace": RELEASE_NAMESPACE, **labels}, first[port], first_at_s, second[port], second_at_s)
            for port, labels in targets[case]
        ]

    groups = alert_groups(control_plane)
    rule = next(rule for group in groups for rule in group["rules"] if rule.get("alert") == ALERT)
    fired = [{"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}]
    tests = [
        {
            "name": name,
            "interval": "60s",
            "input_series": input_series(scrapes(name), steps=20),
            "alert_rule_test": [{"eval_time": "15m", "alertname": ALERT, "exp_alerts": expected}],
        }
        for name, expected in (("healthy", []), ("stalled", fired))
    ]
    run_rule_tests(promtool, groups, tests, tmp_path)
