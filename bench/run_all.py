"""Run every benchmark under bench/ (``make bench``), one after another, in this interpreter.

Each script prints its own table and writes its JSON results under ``bench/results/``;
``docs/benchmarks.md`` quotes those figures with the command that produced them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(
        p
        for p in HERE.glob("*.py")
        if p.name not in {"run_all.py", "__init__.py"} and not p.name.startswith("_")
    )
    failed: list[str] = []
    for script in scripts:
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
