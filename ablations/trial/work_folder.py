"""A command's working folder of its own, so that trials running at once never share a file.

Published scripts save under fixed names (``--save model.pt``, ``checkpoint.pth``,
``results.json``) in the folder they run in. Two trials running side by side in the project's
folder would write, and then read, the same file: one trial could test the other's model. So
each trial's program runs in a folder of its own (the experiment's ``outputs/<trial>/`` on
local storage, kept after the experiment), laid out as the project's folder is, so that the
relative paths a script uses still find its files:

- each regular file of the project's top level up to :data:`COPY_MAX_BYTES` is copied (the
  script and its modules: ``model.py``, ``utils.py``, a config): the program imports and
  overwrites its own copies;
- each folder (``data/``, a package) and each larger file is a symbolic link to the project's:
  read as they are, without a copy. A program that writes into such a folder or over such a
  file writes the project's (docs/own-code.md says so: give it ``{trial_dir}`` there);
- the folder that holds the experiment's results (inside the project) is left out.

What the program writes there stays with the trial; a new trial (not a resumed one) starts
from an empty folder. A path that leaves the project's folder (``../data``) resolves from the
trial's folder instead, so a script must reach such data by an absolute path or a link inside
the project.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

COPY_MAX_BYTES = 16 * 1024 * 1024  # top-level files copied up to this size, larger ones linked


def prepare_work_folder(work: Path, project: Path, *, fresh: bool) -> Path:
    """``work`` laid out as ``project`` (see the module's docstring); emptied first where
    ``fresh`` (a new trial). A resumed trial keeps what its program wrote; the links are made
    again (the project's entries may have changed)."""
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    inside = work.resolve()
    for entry in sorted(project.iterdir()):
        target = work / entry.name
        if inside.is_relative_to(entry.resolve()):
            continue  # the folder of the results, which holds this one
        if target.is_symlink():
            target.unlink()
        elif target.exists():
            continue  # the trial's own file from an earlier run of it, or its copy
        if entry.is_file() and not entry.is_symlink() \
                and entry.stat().st_size <= COPY_MAX_BYTES:
            shutil.copy2(entry, target)
        else:
            os.symlink(entry.resolve(), target, target_is_directory=entry.is_dir())
    return work


__all__ = ["COPY_MAX_BYTES", "prepare_work_folder"]
