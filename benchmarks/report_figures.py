"""How long `report` takes with its figures as PNG, PDF and SVG (``--figures all``, the
default) against the PNGs alone (``--figures png``), on the main job's recorded results
(tests/fixtures/main_job: 27 trials, the per-sample sections left out).

    python benchmarks/report_figures.py --repeats 5

Each repeat writes the report of a fresh copy of that folder once per setting, in this
process, the order alternating, after one report not counted (it loads matplotlib's fonts).
Prints a markdown table: per setting, the median, min and max seconds of the report and of its
process's CPU, the files it wrote into report_files/, and the medians' ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import REPO, machine, markdown

from ablations.results.report.build import write_report

FOLDER = REPO / "tests" / "fixtures" / "main_job"
SETTINGS = ("all", "png")


def one_report(figures: str) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, files in report_files/) of one report of a fresh copy of
    FOLDER with ``--figures figures``."""
    with tempfile.TemporaryDirectory(prefix="bench-report-") as scratch:
        folder = Path(scratch) / "main_job"
        shutil.copytree(FOLDER, folder)
        cpu, start = time.process_time(), time.perf_counter()
        write_report(folder, figures=figures)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return wall, cpu, len(list((folder / "report_files").iterdir()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one_report("all")  # not counted: matplotlib's font cache and imports
    runs: dict[str, list[tuple[float, float, int]]] = {figures: [] for figures in SETTINGS}
    for repeat in range(args.repeats):
        for figures in SETTINGS[::1 if repeat % 2 == 0 else -1]:
            runs[figures].append(one_report(figures))
    rows, medians = [], {}
    for figures in SETTINGS:
        walls, cpus, files = zip(*runs[figures])
        medians[figures] = statistics.median(walls)
        rows.append([f"--figures {figures}", f"{medians[figures]:.2f}",
                     f"{min(walls):.2f}-{max(walls):.2f}", f"{statistics.median(cpus):.2f}",
                     f"{min(cpus):.2f}-{max(cpus):.2f}", str(files[0])])
    print(f"report of tests/fixtures/main_job, {args.repeats} repeats; {machine()}\n")
    print(markdown(["figures", "median s", "min-max s", "median CPU s", "min-max CPU s",
                    "files in report_files/"], rows))
    print(f"\nratio of the medians, png / all: {medians['png'] / medians['all']:.2f}")


if __name__ == "__main__":
    main()
