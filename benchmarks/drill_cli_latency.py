"""How long the quick drill commands take (they read the metadata index and never import torch).

Run: `.venv/bin/python benchmarks/drill_cli_latency.py` (prints the median wall time of 5 runs per command).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = (["list"], ["daily"], ["stats"], ["hint", "tensors-logsumexp"], ["start", "tensors-logsumexp"])


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HARNESS_HOME": home}
        for command in COMMANDS:
            times = []
            for _ in range(5):
                began = time.perf_counter()
                subprocess.run([sys.executable, "-m", "harness", "drill", *command], env=env, check=True,
                               capture_output=True)
                times.append(time.perf_counter() - began)
            print(f"harness drill {' '.join(command):28s} median {statistics.median(times):.2f} s")


if __name__ == "__main__":
    main()
