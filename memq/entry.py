"""The ``memq`` console script. The command line runs and talks to the server, whose
dependencies are the ``server`` extra: without them, one line says what to install instead of
an ImportError traceback (``pip install memq`` alone is the SDK)."""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from memq.cli import main as run
    except ImportError as exc:
        print(
            f"memq: the command line needs the server's packages ({exc.name} is missing): "
            "pip install 'memq[server]'",
            file=sys.stderr,
        )
        return 2
    return run()
