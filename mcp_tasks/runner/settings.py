"""`RunnerSettings`: the embedded runner's settings (group `runner` of the settings tree). Values only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """Settings of the embedded runner (group `runner` of `Settings`).

    Attributes:
        max_concurrent_tasks: task processes run at once; more wait as `working`. Default 16.
        lease_duration_s: worker lease length in seconds; renewed every third of it. A crashed server's
            tasks are recovered this long after the crash. Default 30.
        claim_poll_s: how often to look for runnable tasks written by other processes, in seconds. Default 1.
        sweep_interval_s: how often expired tasks are deleted, in seconds. Default 30.
        inline_result_max_bytes: largest result kept inline, in bytes (default 256 KiB); larger → artifact.
        artifact_max_bytes: largest result accepted at all, in bytes (default 64 MiB).
        shutdown_grace_s: SIGTERM → SIGKILL grace for running tools when the server stops, in seconds.
        stop_hands_over: what a graceful stop (SIGTERM, Ctrl-C) does with running tool processes whose run
            is recorded for adoption (a state folder, `/proc`): true (the default) leaves them running, their
            tasks unchanged, for the next start on the same data folder to adopt, as after a crash (a task
            waiting for input stays `input_required` and answerable); false stops them and applies the
            restart rule (idempotent: run again at the next start; otherwise failed, outcome unknown). A tool
            left running whose server never comes back gives up when the worker API stays unreachable
            (the runtime retries for 5 min). Calls on warm workers and synchronous calls are stopped either way
            (docs/design.md §7).
        max_input_rounds: synchronous runs that may wait for their callers' next input round at once
            (SEP-2322); they do not take task slots. One tenant may hold at most half of them (rounded
            up), so it cannot take every place from the others. Past either a run's ask is refused and
            its call ends with a tool error saying so (naming no count). Default 64.
    """

    max_concurrent_tasks: int = 16
    lease_duration_s: float = 30.0
    claim_poll_s: float = 1.0
    sweep_interval_s: float = 30.0
    inline_result_max_bytes: int = 256 * 1024
    artifact_max_bytes: int = 64 * 1024 * 1024
    shutdown_grace_s: float = 5.0
    stop_hands_over: bool = True
    max_input_rounds: int = 64
