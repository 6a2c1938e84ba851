"""The real gateway for the benchmark: exactly `mcptasks serve ARGS`, optionally under cProfile.

    python -m bench.server [--profile OUT.prof] serve --tools bench/tools --data-dir DIR --port 0

Without `--profile` this is the `mcptasks` console script (`mcp_tasks.cli.main.main`). With it, the
whole server (main thread: event loop, gateway, aiosqlite callbacks) runs under `cProfile` and the
stats are written to OUT.prof when the server stops (SIGTERM). Figures measured while profiling are
not comparable with the unprofiled ones.
"""

from __future__ import annotations

import cProfile
import sys

from mcp_tasks.cli.main import main


def run(argv: list[str]) -> int:
    if argv[:1] == ["--profile"]:
        out, rest = argv[1], argv[2:]
        profiler = cProfile.Profile()
        try:
            code = profiler.runcall(main, rest)
        finally:
            profiler.dump_stats(out)
        return code
    return main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
