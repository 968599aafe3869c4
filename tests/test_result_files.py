"""Result files as a shared folder needs them: created with the process's umask, as any other
file it writes (not the owner-only 0600 of a temporary file)."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from ablations.results.io.files import (access_denied, process_umask, write_json_atomic,
                                        write_parquet_atomic)


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


# Lines as pyarrow words them (arrow/filesystem/s3_internal.h: "AWS Error <type> during <op>
# operation: <message>"; an UNKNOWN type carries the HTTP status).
@pytest.mark.parametrize("line, refused", [
    ("When getting information for bucket 'exp': AWS Error ACCESS_DENIED during HeadBucket "
     "operation: No response body.", True),
    ("AWS Error UNKNOWN (HTTP status 403) during HeadBucket operation: No response body.", True),
    ("AWS Error UNKNOWN (HTTP status 400) during PutObject operation: AccessDenied", True),
    ("google::cloud::Status(PERMISSION_DENIED: caller lacks storage.buckets.get)", True),
    ("error_info={reason=, metadata={http_status_code=403}}", True),
    # a 403 that is not a status: the endpoint's port, a bucket's name, a host, a time, an id
    ("When getting information for bucket 'exp': AWS Error NETWORK_CONNECTION during HeadBucket "
     "operation: curlCode: 7, Couldn't connect to server 127.0.0.1:40345", False),
    ("AWS Error NO_SUCH_BUCKET during HeadBucket operation: bucket 'exp-403' not found", False),
    ("AWS Error NETWORK_CONNECTION during HeadBucket operation: s3.eu-403.example", False),
    ("AWS Error NETWORK_CONNECTION during HeadBucket operation: timed out after 403 ms", False),
    ("AWS Error INTERNAL_FAILURE during HeadBucket operation: request id 9F403AB 403", False),
])
def test_only_a_stated_refusal_reads_as_refused_credentials(line, refused):
    assert access_denied(line) is refused
