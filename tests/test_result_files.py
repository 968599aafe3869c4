"""Result files as a shared folder needs them: created with the process's umask, as any other
file it writes (not the owner-only 0600 of a temporary file)."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from ablations.results.io.files import process_umask, write_json_atomic, write_parquet_atomic


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_a_result_file_has_the_mode_the_umask_gives(tmp_path, mask):
    previous = os.umask(mask)
    try:
        assert process_umask() == mask
        parquet = write_parquet_atomic(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")
        json_file = write_json_atomic({"a": 1}, tmp_path / "e.json")
        touched = tmp_path / "plain"
        touched.write_text("x")  # what any other file of the process gets
    finally:
        os.umask(previous)
    for path in (parquet, json_file):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~mask
        assert stat.S_IMODE(os.stat(path).st_mode) == stat.S_IMODE(touched.stat().st_mode)
