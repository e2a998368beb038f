"""httpx as paddlectl imports it: without httpx's own command line.

httpx's __init__ imports its command line, httpx._main, wherever click is installed, and with it
click, rich and pygments: about 40 ms, as long as the rest of a paddlectl command's start.
Without click that import fails and httpx puts a stub in its place. paddlectl never runs httpx's
command line, so it has httpx take the stub while it imports httpx; a later `import httpx._main`
still works. Every paddlectl module imports httpx from here (client/tests/test_cli_start.py).
"""

from __future__ import annotations

import sys

_skip_cli = "httpx" not in sys.modules and "httpx._main" not in sys.modules
if _skip_cli:
    sys.modules["httpx._main"] = None  # type: ignore[assignment]  # None: "cannot be imported"
try:
    import httpx as httpx
except ImportError:  # an httpx that cannot do without its command line: import it whole
    if not _skip_cli:
        raise
    del sys.modules["httpx._main"]
    _skip_cli = False
    import httpx as httpx
finally:
    if _skip_cli:
        del sys.modules["httpx._main"]
