"""Long fuzz runs of the BE request path and the SQL validator (tests/wire/fuzz), bounded.

CI runs the same targets briefly with fixed examples; this runs them with fresh random
examples, `--examples` per target, and stops after `--minutes` whatever happens.

    python bench/fuzz.py --examples 20000 --minutes 10
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=20000, help="hypothesis examples per target")
    ap.add_argument("--minutes", type=float, default=10.0, help="hard stop")
    args = ap.parse_args()
    env = {**os.environ, "FUZZ_EXAMPLES": str(args.examples), "FUZZ_RANDOM": "1", "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "wire" / "fuzz"), "-q", "-p", "no:cacheprovider",
           "--timeout", str(int(args.minutes * 60)), "-o", "log_level=WARNING"]
    try:
        return subprocess.run(cmd, env=env, cwd=ROOT, timeout=args.minutes * 60 + 120).returncode
    except subprocess.TimeoutExpired:
        print(f"fuzz run stopped after {args.minutes} minutes", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
