"""What git tracks stays source: no large files, no build artefacts, a small checkout.

Uses `git ls-files`; skipped outside a git checkout (an unpacked sdist, a copy without .git).
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_FILE_BYTES = 1_000_000  # 1 MB
MAX_TOTAL_BYTES = 4_000_000  # 4 MB: 2.2 MB of it is Python source
# Build artefacts, matched at any depth: file name patterns, and folders whose content is one.
ARTEFACT_FILES = ("*.whl", "*.tar.gz", "*.pyc")
ARTEFACT_FOLDERS = ("*.egg-info", "dist", "build", "__pycache__")


def tracked_files() -> list[str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot list tracked files")
    result = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout ({result.stderr.strip()})")
    return [name for name in result.stdout.split("\0") if name]


def is_artefact(name: str) -> bool:
    path = PurePosixPath(name)
    if any(fnmatch.fnmatch(path.name, pattern) for pattern in ARTEFACT_FILES):
        return True
    return any(fnmatch.fnmatch(folder, pattern)
               for folder in path.parts[:-1] for pattern in ARTEFACT_FOLDERS)


def size(name: str) -> int:
    path = REPO / name
    return path.stat().st_size if path.is_file() else 0  # deleted but not yet committed: 0


@pytest.fixture(scope="module")
def files() -> list[str]:
    return tracked_files()


@pytest.mark.slow
def test_no_tracked_file_is_larger_than_1_mb(files):
    large = [f"{name} ({size(name):,} bytes)" for name in files if size(name) > MAX_FILE_BYTES]
    assert not large, "tracked files larger than 1 MB: " + ", ".join(large)


@pytest.mark.slow
def test_no_build_artefact_is_tracked(files):
    artefacts = [name for name in files if is_artefact(name)]
    assert not artefacts, ("build artefacts tracked (git rm --cached them; .gitignore lists "
                           "the patterns): " + ", ".join(artefacts))


@pytest.mark.slow
def test_tracked_files_total_less_than_4_mb(files):
    total = sum(size(name) for name in files)
    largest = sorted(files, key=size, reverse=True)[:5]
    assert total < MAX_TOTAL_BYTES, (
        f"tracked files total {total:,} bytes (limit {MAX_TOTAL_BYTES:,}); largest: "
        + ", ".join(f"{name} ({size(name):,})" for name in largest))


def test_gitignore_lists_the_artefact_patterns():
    ignored = {line.strip().rstrip("/") for line in (REPO / ".gitignore").read_text().splitlines()}
    missing = [pattern for pattern in (*ARTEFACT_FILES, *ARTEFACT_FOLDERS)
               if pattern not in ignored]
    assert not missing, f".gitignore lacks {missing}"


@pytest.mark.parametrize("name, artefact", [
    ("dist/ablation_runner-0.1.0-py3-none-any.whl", True),
    ("ablation_runner-0.1.0.tar.gz", True),
    ("ablation_runner.egg-info/PKG-INFO", True),
    ("build/lib/ablations/cli.py", True),
    ("ablations/__pycache__/cli.cpython-311.pyc", True),
    ("results/__pycache__/x.py", True),
    ("ablations/cli.py", False),
    ("docs/report.png", False),
    ("benchmarks/data.py", False),
])
def test_artefact_patterns(name, artefact):
    assert is_artefact(name) is artefact
