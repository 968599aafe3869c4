"""Render a report.html in headless Chromium and check what a reader would see.

    python -m tools.browser_check ablation_results/<experiment>/report.html [--width 1366]
        [--screenshot report.png]

Checks, with every collapsed section (``<details>``) opened: every figure loaded (an ``<img>``
with a decoded image, ``naturalWidth > 0``), and nothing wider than the window (the page's
``scrollWidth`` within ``--width``, no element reaching past its right edge). Prints one line
per check and exits 1 when one fails, 2 when Chromium is missing. Chromium: Debian's
``apt-get install chromium``, or any ``chromium``/``chromium-browser``/``google-chrome`` on
PATH (``--chromium PATH`` names another).

How: a copy of the page with a small script that writes the measurements into the page,
read back with ``--dump-dom`` (Chromium's headless mode, no driver library needed).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MARKER = "report-browser-check"
PROBE = """<script>
window.addEventListener('load', () => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const width = document.documentElement.clientWidth;
  const images = [...document.images].map(i => ({alt: i.alt, loaded: i.complete &&
    i.naturalWidth > 0, width: i.getBoundingClientRect().width}));
  const wide = [...document.body.querySelectorAll('*')]
    .filter(e => e.getBoundingClientRect().right > width + 0.5)
    .map(e => e.tagName.toLowerCase() + (e.textContent || '').trim().slice(0, 40));
  const out = document.createElement('pre');
  out.id = '%s';
  out.textContent = JSON.stringify({width: width, scrollWidth:
    document.documentElement.scrollWidth, images: images, wide: wide.slice(0, 10)});
  document.body.appendChild(out);
});
</script>""" % MARKER


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def find_chromium(explicit: Optional[str] = None) -> Optional[str]:
    if explicit:
        return explicit if shutil.which(explicit) or Path(explicit).exists() else None
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def _headless(chromium: str, width: int, *args: str, height: int = 900,
              timeout: float = 120) -> str:
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--disable-dev-shm-usage", f"--window-size={width},{height}",
               "--virtual-time-budget=10000", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()
        raise RuntimeError(f"{chromium} exited with {done.returncode}: "
                           f"{last[-1] if last else 'no message'}")
    return done.stdout


def measure(report: Path, chromium: str, width: int = 1366) -> dict:
    """The page's measurements (see the module's docstring) at a window ``width`` px wide."""
    page = report.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="report-check-") as scratch:
        copy = Path(scratch) / report.name
        copy.write_text(page.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
        dom = _headless(chromium, width, "--dump-dom", copy.as_uri())
    found = re.search(rf"<pre id=\"{MARKER}\">(.*?)</pre>", dom, re.S)
    if not found:
        raise RuntimeError("the page's measurements did not come back (did it load?)")
    return json.loads(html.unescape(found.group(1)))


def checks(measured: dict, width: int) -> list[Check]:
    images = measured["images"]
    missing = [image["alt"] for image in images if not image["loaded"]]
    return [
        Check("figures load", bool(images) and not missing,
              f"{len(images) - len(missing)} of {len(images)} loaded"
              + (f"; not loaded: {', '.join(missing)}" if missing else "")),
        Check(f"fits {width} px", measured["scrollWidth"] <= width and not measured["wide"],
              f"page {measured['scrollWidth']} px wide"
              + (f"; past the edge: {'; '.join(measured['wide'][:3])}"
                 if measured["wide"] else "")),
    ]


def screenshot(report: Path, target: Path, chromium: str, width: int = 1366,
               height: int = 1600) -> Path:
    """A PNG of the top of the page, ``width`` × ``height`` px."""
    _headless(chromium, width, f"--screenshot={target.resolve()}", report.resolve().as_uri(),
              height=height)
    return target


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.browser_check",
                                     description="Render a report.html in headless Chromium: "
                                     "do the figures load, does it fit the width?")
    parser.add_argument("report", type=Path, help="report.html")
    parser.add_argument("--width", type=int, default=1366, help="window width (px)")
    parser.add_argument("--screenshot", type=Path, help="also save the top of the page here")
    parser.add_argument("--chromium", help="the browser's executable")
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if chromium is None:
        looked = args.chromium or ", ".join(BROWSERS)
        print(f"{parser.prog}: error: no Chromium found ({looked}); install it, "
              "e.g. apt-get install chromium", file=sys.stderr)
        return 2
    if not args.report.is_file():
        print(f"{parser.prog}: error: {args.report}: no such file", file=sys.stderr)
        return 2
    try:
        results = checks(measure(args.report, chromium, args.width), args.width)
        for check in results:
            print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name:<16} {check.detail}")
        if args.screenshot:
            shot = screenshot(args.report, args.screenshot, chromium, args.width)
            if not shot.is_file():
                raise RuntimeError(f"{args.screenshot}: not written (does its folder exist?)")
            print(f"screenshot: {shot}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"{parser.prog}: error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    return 0 if all(check.ok for check in results) else 1


if __name__ == "__main__":
    sys.exit(main())
