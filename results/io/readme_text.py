"""The parts of results/README.md besides the columns of the three files: the experiment
folder's files, experiment.json's provenance, and the tables the analysis returns (their
columns: :mod:`ablations.results.io.table_columns`). :func:`ablations.results.io.schema.
render_markdown` puts them together with the files' columns."""

# The rows of the Markdown tables: a row cannot wrap.
# ruff: noqa: E501

from __future__ import annotations

from ablations.results.io.table_columns import (
    ACROSS_COLUMNS,
    COMPARE_COLUMNS,
    SEQUENTIAL_COLUMNS,
    SPENT_COLUMNS,
    VERDICT_COLUMNS,
)

# The title, the experiment folder's files, how they are written and read
FOLDER_TEXT = """# Results: the experiment folder and its Parquet schema

Every run writes `<storage>/<experiment>/` (default storage: `./ablation_results`):

| file | one row per |
|---|---|
| `trials.parquet` | trial (variant × seed), whatever its status |
| `epochs.parquet` | trial × epoch: the learning curves |
| `predictions.parquet` | test sample × ok trial |
| `experiment.json` | (JSON) `schema_version` (2: the layout described here; 1 is read with its `hpo` and `sequential` keys as `search` and `rounds`; another, or none, is refused when read), what was run: space, every trial's resolved config (and `trial_order`, the plan's order, which the tables keep after a resume), skipped cells, command, and `provenance` (below); `planned`: the reference, metric, margin and α the verdicts are decided on, recorded before the first trial, and for a fixed-seed ablation table the sequential design it is the pilot look of (`design`, and `seeds`: the seed order up to `--max-seeds`; results/stats/planned.py); for `--seeds auto`, `rounds`: the design (looks, α shares), the seed order, the metric, margin and α the rounds decided on, every cell up to `--max-seeds` (`plan`) and each round's trials and Tune folder (`rounds`); for `--tune-each`, `tuned`: the keys, their ranges, the budget per arm, the tuning seed, each arm's best values and best tuning trial, and the stages that ended with their trials (docs/tuned.md); timings of the last run: `driver_wall_s` (planning to the end of Tune), `fit_s` (Tune's `fit` alone), `collect_s` (the three tables read and written), and `cluster_cpus` |
| `tune/` | Ray Tune's own state, each trial's final checkpoint, TensorBoard/CSV/JSON logs (`--seeds auto`: the pilot's; round k's in `tune-round<k>/`; `--tune-each`: the table at the configuration given; each arm's search in `tune-tuning-<arm>/`, the arms at their own best in `tune-tuned/`) |
| `optuna.db` | the Optuna studies (SQLite) of a search space, or one per arm (`<experiment>-<arm>`) of `--tune-each` |
| `baseline_check.json` | (JSON) the reference checked before the verdicts (`results/stats/baseline_check.py`, docs/verdicts.md "The baseline check"), written at the end of a run with verdicts: `reference`, `seeds`, its mean `test_mae`, `test_mae_mean_predictor`, `skill` (1 − their ratio), `epochs`, `last_epoch_fall` (median share by which the validation MAE fell in the last epoch), `learned` (skill ≥ `skill_floor`), `converged` (fall ≤ `still_falling_share`), `passed`, and the `line` printed above the verdicts |
| `trial_state/` | each trial's resumable state after its last saved epoch (`state.pt`) and its per-epoch metrics (`history.json`), while the experiment can still be resumed (removed when every trial ended ok, diverged, stopped or skipped) |

Files are written atomically (a temporary file in the same folder, fsync, rename): a crash
leaves either the previous file or the new one, never half of one. `trials.parquet` is written
last, so its presence means the other two are complete.

Read them with pandas:

```python
import pandas as pd
trials = pd.read_parquet("ablation_results/<experiment>/trials.parquet")
ok = trials[trials.status == "ok"]
ok.groupby("ablation")["test_mae"].agg(["mean", "std", "count"])
```

or `results.read_experiment(path)`, which returns the three tables and names a missing file.

This file is `results/io/schema.py` rendered (`python -m ablations.results.io.schema`); a test checks that a
real run writes every column and that this file is up to date.
"""

# experiment.json's provenance, resume history and growth
PROVENANCE_TEXT = """## experiment.json: provenance

`provenance` holds what is needed to trust and repeat the experiment (`ablations/experiment/provenance/provenance.py`);
it is written when the experiment starts and replaced at every resume:

| key | what |
|---|---|
| `code` | `sha256` of the source that runs: every `.py` file of `model/`, `ablations/`, `search_spaces/`, `results/` and `run_ablations.py`, by path and content (a git checkout or not) |
| `own_code` | the researcher's code a command or training function runs (null for the built-in model): `root` (the folder), `files` (path -> 16 hex of its sha256: the `.py` files of the folder the experiment starts in, and the files the command line names; a function outside it: its package), `sha256`, `truncated`, `packages` (the installed packages those `.py` files import -> version: part of a trial's identity); a resume names the files that changed |
| `git` | `commit`; `dirty` (tracked files differ from the commit); `diff_sha256` (sha256 of the bytes of `git diff HEAD --binary`, null when clean); `untracked` (names of untracked files git does not ignore, the first 100; their contents are not read: an untracked source file is covered by `code`); null outside a git checkout |
| `packages` | versions of Python, torch, ray, numpy, pandas, pyarrow, optuna, scipy |
| `environment` | every installed distribution and its version (a freeze) |
| `device` | the driver's: CPU model, hostname, CUDA device names and compute capabilities (the device each trial ran on is `device_name` in trials.parquet) |
| `data` | per data source (`data_source`): for a file dataset the files' sizes and mtimes, `images.npy`'s shape and dtype, the sha256 of `table.parquet` and of the bytes of 64 samples of `images.npy` picked with a fixed seed (at most 256 KiB of each; the file is never read whole); for the synthetic set its spec and cache key; for own code (`own code`) `files`, the files its trials name that are not code (a command line's words and a configuration's string values that are existing files) -> 16 hex of their sha256 (a file over 64 MiB: its start, middle and end), and `words`, each such word -> the file it names (a trial's `data_fingerprint` covers the files its own words name). `fingerprint`: a short hash of all but the mtimes |

A resume (`--resume`, or the same `--name` with the same plan) compares the recorded `code` and
`data` fingerprints with the current ones and refuses to continue when one changed, unless
`--allow-changed`; mtimes and the commit as such are not compared (a copy of the same bytes is
the same data; a commit that changes only docs or tests changes no code that runs).
`resume_history` has one entry per resume that found a difference: when (`at`), `changed` (code
or data: the resume had `--allow-changed`), `notes` (git commit or diff, package versions,
device) and the `previous` provenance (without `environment`).
`grown` has one entry per time a finished table took new variants under its name
(docs/resume.md): when (`at`), the Tune folder of its new trials (`tune`), `variants_before`,
`added`, the trials `kept` and `trials_added`, and the space's name before and after
(`space_before`, `space`).
"""


def markdown_table(columns: list[tuple[str, str, str]]) -> str:
    """``(name, dtype, meaning)`` rows as a Markdown table of column, type and meaning."""
    rows = ["| column | type | meaning |", "|---|---|---|"]
    rows += [f"| `{name}` | {dtype} | {text} |" for name, dtype, text in columns]
    return "\n".join(rows)


def returned_tables_text() -> str:
    """The verdict tables the analysis returns, each with its columns."""
    return f"""## Verdict tables (returned, not written)

The verdicts are computed from the files, not stored. `experiment_verdicts(directory)`
(`results/stats/decisions.py`) gives an experiment's verdict table as its design decided it:
the sequential table for a `--seeds auto` run and for a fixed run that is the pilot look of its
planned design, else the fixed-design table, on the settings experiment.json recorded.
`verdict_table(trials)` (`results/stats/verdicts.py`, also in `ablations.results.stats.analysis`) gives
the fixed-design verdicts of a trials table: on a `--seeds auto` experiment's trials these are
not the verdicts its rounds decided. `<metric>` is the metric's name (`test_mae_mean` for the
default metric); Δ is variant − reference, paired by seed. The table's `.attrs` hold the metric, reference, margin
(as given and as tested), `relative`, α, direction and the metric's unit.

{markdown_table(VERDICT_COLUMNS)}

The sequential table (`sequential_verdict_table`, `results/stats/sequential_table.py`) reports
each arm's columns from the look that decided it, else the last look it reached, and adds these
columns (and `design`, `seeds`, `sequential` and `diff_ci` = `"repeated"` to `.attrs`):

{markdown_table(SEQUENTIAL_COLUMNS)}

`compute_spent(trials, max_seeds)`, what the rounds of `--seeds auto` held against a fixed design:

{markdown_table(SPENT_COLUMNS)}

`compare_experiments(a, b)` (`results/stats/compare.py`, the `compare` subcommand) has, per
variant in both, these columns and `test` ... `margin`, `verdict`, `reason` as in the verdict
table, with Δ = B − A and a percentage margin taken of the variant's own mean in A:

{markdown_table(COMPARE_COLUMNS)}

An experiment over several datasets (docs/datasets.md): its verdict table is each dataset's,
one below the other, with a `dataset` column first; `across_datasets.parquet` (written by the
run and by `report`; `ablations.results.stats.decisions.across_datasets_of(trials, meta)` computes it)
has one row per variant, its verdict across the datasets:

{markdown_table(ACROSS_COLUMNS)}
"""
