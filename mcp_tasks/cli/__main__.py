"""`python -m mcp_tasks.cli`."""

import sys

from mcp_tasks.cli.main import main

sys.exit(main())
