"""The columns of the tables the analysis returns (not files): the verdict table, the
``--seeds auto`` additions, the compute spent and the comparison of two experiments.

:mod:`ablations.results.io.schema` renders them into ``results/README.md``; a test calls each
function on a small trials table and checks that every column it returns is listed here.
``<metric>`` stands for the metric's name (``test_mae_mean`` for the default metric).
"""

from __future__ import annotations

# (name, dtype, meaning) of ablations.results.stats.analysis.verdict_table, in its order. Δ =
# variant − reference per seed; "the family": every variant but the reference.
VERDICT_COLUMNS: list[tuple[str, str, str]] = [
    ("ablation", "string", "the variant; the reference has a row too (verdict `reference`)"),
    ("n_ok", "int64", "ok trials with a finite metric (the seeds the comparison can use)"),
    ("n_excluded", "int64",
     "the variant's other trials: failed, diverged, stopped, skipped, interrupted, not_started, "
     "and ok ones whose metric is NaN or infinite (named in `.attrs[\"dropped_nan\"]`)"),
    ("<metric>_mean", "float64", "mean of the metric over the variant's ok seeds"),
    ("<metric>_ci_low", "float64", "lower end of the 1 − α t interval of that mean"),
    ("<metric>_ci_high", "float64", "upper end of the same interval"),
    ("test", "string",
     "the test of Δ = 0: `shared-variance t` (the run noise estimated from every arm of the "
     "table, the arm's own paired t as a floor; results/stats/shared_variance.py), "
     "`paired t` (the arm's own seeds: an arm with a failed, diverged or outlying seed, a "
     "family where the reference has one, a single variant, or an experiment recorded with "
     "that test), `Welch t` (fewer than two shared seeds), "
     "`t + worst-rank` (a seed where one arm diverged and the other finished), `crossed t` "
     "(`--cross-seeds`), `none (...)`: no test; null on the reference's row"),
    ("n_pairs", "float64", "seeds paired (0: Welch's comparison)"),
    ("diff_mean", "float64", "mean Δ (paired: the mean of the per-seed differences)"),
    ("diff_ci_low", "float64",
     "lower end of the 1 − α t interval of Δ (`--seeds auto`: the repeated confidence "
     "interval at the look the row reports)"),
    ("diff_ci_high", "float64", "upper end of the same interval"),
    ("p_value", "float64",
     "two-sided p of Δ = 0: the t test's, or, with a discordant seed, the combined t and "
     "worst-rank test's"),
    ("effect_size", "float64",
     "Cohen's d_z (mean / s.d. of the paired differences), or Cohen's d for Welch's comparison"),
    ("relative_change", "float64",
     "diff_mean as a share of the reference's mean (over the paired seeds when paired)"),
    ("se", "float64", "standard error of Δ"),
    ("df", "float64",
     "degrees of freedom of the t distribution (n − 1 paired, Welch-Satterthwaite)"),
    ("p_holm", "float64", "p_value after Holm over the family (`--seeds auto`: empty)"),
    ("tost_ci_low", "float64", "lower end of the 1 − 2α interval of Δ, the one TOST reads"),
    ("tost_ci_high", "float64", "upper end of the same interval"),
    ("ratio", "float64", "the variant's mean over the reference's, minus 1"),
    ("ratio_ci_low", "float64",
     "lower end of Fieller's 1 − 2α interval of that ratio minus 1 (a percentage margin's TOST)"),
    ("ratio_ci_high", "float64", "upper end of the same interval"),
    ("p_tost", "float64", "the larger of the two one-sided p-values against the margin"),
    ("equivalence_bound", "float64",
     "the smallest margin at which TOST alone declares equivalence at α (a share of the "
     "reference's mean for a percentage margin)"),
    ("p_worst_rank", "float64",
     "p of the worst-rank test where a seed is discordant (a diverged run ranks below every "
     "finished one), else null"),
    ("p_tost_holm", "float64", "p_tost after Holm over the family (`--seeds auto`: empty)"),
    ("equivalence_bound_holm", "float64",
     "the smallest margin at which Holm over the family declares equivalence: `equivalent` "
     "exactly when it is below `margin` and the row is neither outlier nor unstable "
     "(`--seeds auto`: at the nominal level of the reported look)"),
    ("outlier", "boolean",
     "the robustness rule: a seed's Δ lies far from the others' (no margin claim)"),
    ("unstable", "boolean", "more diverged seeds than the reference: never `equivalent`"),
    ("significant", "boolean", "the test of Δ = 0 rejects after Holm (or at its look)"),
    ("equivalent", "boolean", "TOST rejects after Holm (or at its look)"),
    ("verdict", "string",
     "worse / better (higher / lower for a metric without a direction) / significant / "
     "equivalent / negligible / inconclusive; `reference` on the reference's row"),
    ("n_diverged", "int64", "seeds on which the variant's training diverged"),
    ("n_outcomes", "int64",
     "seeds on which the variant's training ended ok or diverged (the machinery's failures "
     "left out)"),
    ("failure_rate_upper", "float64",
     "one-sided 1 − α upper confidence bound (Clopper-Pearson) on the rate at which the "
     "variant's training diverges, from n_diverged of n_outcomes; 1 where every seed diverged"),
    ("reason", "string",
     "why the row reads as it does where its numbers do not say (diverged seeds, an outlying "
     "seed, no seed variance); else empty"),
    ("no_seed_variance", "boolean",
     "every ok seed of the arm, or of the reference, gave one value: no verdict, and no test's "
     "numbers (results/stats/seed_ties.py); on the reference's row, its own seeds"),
    ("margin", "float64",
     "the margin tested: in the metric's units, or the share for a percentage"),
]

# Added by ablations.results.stats.sequential_table.sequential_verdict_table (`--seeds auto`, and a
# fixed run that is the pilot look of its planned design); the other columns as above, from
# the look that decided the arm, else the last look it reached.
SEQUENTIAL_COLUMNS: list[tuple[str, str, str]] = [
    ("decided_at", "float64", "seeds per arm at the look that decided the verdict; null: none did"),
    ("looks", "float64", "how many looks the arm reached"),
    ("level_diff", "float64", "nominal level of the test of Δ = 0 at the reported look"),
    ("level_eq", "float64", "nominal level of the equivalence test at the reported look"),
]

# ablations.results.stats.sequential_table.compute_spent: one row per variant.
SPENT_COLUMNS: list[tuple[str, str, str]] = [
    ("ablation", "string", "the variant"),
    ("trials", "int64", "trials it ran (skipped cells not counted)"),
    ("rounds", "int64", "the last round it ran in"),
    ("cpu_hours", "float64", "CPU-hours its trials held"),
    ("gpu_hours", "float64", "GPU-hours its trials held"),
    ("fixed_trials", "int64", "trials a fixed design of `--max-seeds` seeds would run"),
    ("fixed_cpu_hours", "float64",
     "CPU-hours of that fixed design: the mean per trial times `--max-seeds`"),
    ("fixed_gpu_hours", "float64", "GPU-hours of that fixed design, the same way"),
]

# ablations.results.stats.compare.compare_experiments (B against A, per variant in both): these, and
# test, n_pairs, diff_mean ... margin, verdict, reason as in the verdict table with Δ = B − A
# and a percentage margin of the variant's own mean in A.
COMPARE_COLUMNS: list[tuple[str, str, str]] = [
    ("n_a", "int64", "the variant's ok trials with a finite metric in A"),
    ("n_b", "int64", "the same in B"),
    ("a_mean", "float64", "the variant's mean in A"),
    ("b_mean", "float64", "the variant's mean in B"),
    ("identical", "bool",
     "every shared seed gave the same value bit for bit (the same machine and software stack)"),
]

# ablations.results.stats.datasets.across_datasets (across_datasets.parquet): one row per variant,
# its verdict across the datasets of an experiment over several (docs/datasets.md). Ratios are the
# variant's mean over the reference's, minus 1, pooled over the datasets.
ACROSS_COLUMNS: list[tuple[str, str, str]] = [
    ("ablation", "string", "the variant"),
    ("n_datasets", "int64", "datasets pooled: those with two seed pairs and means above 0"),
    ("ratio", "float64",
     "the pooled ratio minus 1: the mean of the datasets' log ratios, exponentiated"),
    ("ratio_ci_low", "float64",
     "lower end of its 1 − α interval (t on k − 1 df from the datasets' spread)"),
    ("ratio_ci_high", "float64", "upper end of the same interval"),
    ("tost_ci_low", "float64", "lower end of the 1 − 2α interval the equivalence test reads"),
    ("tost_ci_high", "float64", "upper end of the same interval"),
    ("pi_low", "float64",
     "lower end of the 1 − α prediction interval: a new dataset's ratio minus 1, measured "
     "with as many seeds"),
    ("pi_high", "float64", "upper end of the same interval"),
    ("tau", "float64",
     "between-dataset standard deviation of the log ratio (Paule-Mandel; a description)"),
    ("i2", "float64",
     "share of the log ratios' spread that is between datasets (I²; a description)"),
    ("tau_upper", "float64",
     "one-sided 1 − α upper bound on tau (Q-profile): the spread between datasets the data "
     "do not rule out"),
    ("new_beyond_upper", "float64",
     "the share of datasets like these whose true ratio may lie beyond the margin: tau at its "
     "bound, the pooled ratio at the worse end of its 1 − 2α interval; above 10%, an "
     "equivalence carries the 'on average' reason"),
    ("df", "float64", "degrees of freedom of the pooled t test (k − 1)"),
    ("p_value", "float64", "two-sided p of a pooled ratio of 1"),
    ("p_holm", "float64", "p_value after Holm over the variants"),
    ("p_tost", "float64", "the larger one-sided p against the margin"),
    ("p_tost_holm", "float64", "p_tost after Holm over the variants"),
    ("significant", "bool", "the pooled test rejects after Holm"),
    ("equivalent", "bool",
     "the pooled equivalence test rejects after Holm and no dataset's row is unstable"),
    ("unstable", "bool", "more diverged seeds than the reference on some dataset"),
    ("verdict", "string",
     "worse / better (higher / lower) / equivalent / negligible / inconclusive across the "
     "datasets"),
    ("n_same_direction", "int64", "datasets whose ratio points the pooled way"),
    ("dataset_verdicts", "string", "the datasets' own verdicts, counted ('worse 2, "
     "inconclusive 1')"),
    ("on_every_dataset", "string",
     "the verdict every dataset reached on its own (worse, better, equivalent, ...), else empty"),
    ("reason", "string",
     "why the row reads as it does: too few datasets pooled, unstable, or equivalent on "
     "average only (the prediction interval reaches past the margin)"),
    ("margin", "float64", "the margin tested, a share of the reference's mean"),
]
