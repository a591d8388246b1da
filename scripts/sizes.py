"""Report the source files longer than one sitting (Python > 600 lines, C++ > 500): a smell
to look at, not a gate.  ``python scripts/sizes.py`` (scripts/dev.sh test prints it)."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMITS = {".py": 600, ".cpp": 500, ".h": 500}
SKIP = ("tests/integrations/vllm_upstream/", "tests/integrations/sglang_upstream/")


def sizes():
    for dirpath, dirnames, files in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in
                       ("__pycache__", "build") and not d.endswith(".egg-info")]
        for f in files:
            limit = LIMITS.get(os.path.splitext(f)[1])
            rel = os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
            if limit and not rel.startswith(SKIP):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    yield rel, fh.read().count(b"\n"), limit


def main() -> int:
    over = sorted(((n, rel) for rel, n, limit in sizes() if n > limit), reverse=True)
    print(f"source files over {LIMITS['.py']} lines of Python / {LIMITS['.cpp']} of C++: "
          f"{len(over)}")
    for n, rel in over:
        print(f"  {n:5d}  {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
