"""The keeper's script (the keeper itself is keeper_main.py: see there).

The launcher and the service know a keeper in the process list by this file's path, so this is
what runs; it only runs keeper_main from its cached bytecode. Python compiles a script anew at
every start, which for the whole keeper was ~5 ms of each replica's start.
"""

import os
import sys

if __name__ == "__main__":
    # The parent of launcher/, which the launcher itself imports from (appended: the standard
    # library's modules come first); the package's __init__ imports nothing.
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from launcher.keeper_main import main

    sys.exit(main(sys.argv[1:]))
