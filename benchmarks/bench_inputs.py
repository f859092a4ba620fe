"""Peak memory of ``hugginggpt run`` on files that never end, against the same run on an empty file.

    python -m benchmarks.bench_inputs [--limit-mib N]

Each case is a real ``hugginggpt run --sandbox`` process with ``[storage] max_file_bytes`` and
``[documents] max_pdf_bytes`` set to the limit; its peak resident memory comes from ``wait4`` on
that process alone. The baseline is ``--file /dev/null`` (refused as empty before anything is
read). Printed per case: exit status, seconds, peak RSS, and peak RSS over the baseline as a
multiple of the limit (a read bounded by the limit stays near 1.0; without the bound ``/dev/zero``
grows until the machine gives out).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

MiB = 1024 * 1024


def measure(path: str, limit: int, stdin: int | None = None) -> tuple[int, float, int]:
    """(exit status, seconds, peak RSS in bytes) of ``hugginggpt run --sandbox`` with ``--file path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": tempfile.mkdtemp(prefix="bench-inputs-"),
                "HUGGINGGPT_STORAGE__MAX_FILE_BYTES": str(limit), "HUGGINGGPT_DOCUMENTS__MAX_PDF_BYTES": str(limit)})
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "hugginggpt", "run", "--sandbox", "Describe", "--file", path],
                            stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.monotonic() - started, usage.ru_maxrss * 1024


def main() -> None:
    """Print the figures (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-mib", type=int, default=25, help="the file limit, MiB (default 25, the default setting)")
    limit = parser.parse_args().limit_mib * MiB
    _, _, base = measure("/dev/null", limit)
    print(f"file limit {limit // MiB} MiB; baseline (/dev/null) peak RSS {base / MiB:.0f} MiB")
    yes = subprocess.Popen(["yes", "an endless line of text"], stdout=subprocess.PIPE)
    try:
        cases = [("/dev/zero", measure("/dev/zero", limit)), ("endless pipe", measure("/dev/stdin", limit, yes.stdout.fileno()))]
    finally:
        yes.kill()
        yes.wait()
    for name, (status, seconds, peak) in cases:
        print(f"{name:<14} exit {status}  {seconds:5.2f} s  peak RSS {peak / MiB:6.0f} MiB  "
              f"over baseline {(peak - base) / limit:4.2f} x the limit")


if __name__ == "__main__":
    main()
