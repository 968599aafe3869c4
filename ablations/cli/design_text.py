"""What the command line prints about a design (ablations/experiment/designs/): the count on
the run's first line, the dry run's lines, the lines after the summary, the settings the
summary decides with, and what a resume will do. Each function dispatches on the design's
type (``functools.singledispatch``); a new design registers the functions whose default does
not fit it.
"""

from __future__ import annotations

from functools import singledispatch
from types import SimpleNamespace
from typing import Any, Optional, Sequence

from ablations.config import TrialConfig
from ablations.experiment.designs.base import Design
from ablations.experiment.designs.factorial import Factorial
from ablations.experiment.designs.grid import Grid
from ablations.experiment.designs.hpo import BEST_CONFIG_FILE, OPTUNA_FILE, Search
from ablations.experiment.designs.seeds_auto import Rounds
from ablations.experiment.designs.tuned import Stages, startup_trials
from ablations.experiment.options import TUNE_SUBDIR
from ablations.experiment.runner import resume_counts
from ablations.results.io.files import is_file, join
from ablations.results.stats.decisions import factorial_effects_of, tuned_comparison_of
from ablations.results.stats.factorial import effects_view, factorial_note
from ablations.results.stats.planned import pilot_design, pilot_note
from ablations.results.stats.sequential import design_note
from ablations.results.stats.tuned import side_by_side_text

# ------------------------------------------------------------------ the run's first line


@singledispatch
def count(design: Design, trials: Sequence[Any], seeds: Sequence[int],
          crossed: bool = False) -> str:
    """How many trials, for the console's first line."""
    cells = f", crossed: {len(seeds)}x{len(seeds)} cells" if crossed else ""
    datasets = {s.config.dataset for s in trials}
    on = f" x {len(datasets)} datasets" if len(datasets) > 1 else ""
    return (f"{len(trials)} trials ({len({s.variant for s in trials})} variants x "
            f"{len(seeds)} seeds{on}{cells})")


@count.register
def _(design: Factorial, trials: Sequence[Any], seeds: Sequence[int],
      crossed: bool = False) -> str:
    return (f"{len(trials)} trials ({len(design.factorial.cells)} cells of a "
            f"{design.factorial.label} x {len(seeds)} seeds)")


@count.register
def _(design: Search, trials: Sequence[Any], seeds: Sequence[int],
      crossed: bool = False) -> str:
    return f"{design.search.num_samples} sampled trials"


@count.register
def _(design: Rounds, trials: Sequence[Any], seeds: Sequence[int],
      crossed: bool = False) -> str:
    looks = design.run.design.looks
    return (f"{len({s.variant for s in design.run.plan.values()})} variants, seeds in "
            f"rounds ({looks[0]} seeds, then up to {looks[-1]} where no verdict yet)")


@count.register
def _(design: Stages, trials: Sequence[Any], seeds: Sequence[int],
      crossed: bool = False) -> str:
    run = design.run
    arms, evaluation = len(run.arms()), len(run.plan)
    return (f"{arms} variants x {len(seeds)} seeds, each tuned with {run.budget} "
            f"trials: {evaluation} + {arms * run.budget} + {evaluation} trials")


# ------------------------------------------------------------------ the dry run


@singledispatch
def design_lines(design: Design, alpha: float) -> list[str]:
    """What ``--dry-run`` prints about the design before the data and the trials."""
    return []


@design_lines.register
def _(design: Grid, alpha: float) -> list[str]:
    planned = pilot_design(design.planned)
    return [pilot_note(planned, alpha)] if planned is not None else []


@design_lines.register
def _(design: Factorial, alpha: float) -> list[str]:
    return design.factorial.lines()


@design_lines.register
def _(design: Rounds, alpha: float) -> list[str]:
    return [f"{design_note(design.run.design, alpha)} The pilot's trials:"]


@design_lines.register
def _(design: Stages, alpha: float) -> list[str]:
    run = design.run
    ranges = "; ".join(f"{key} {kind} {list(args)}" for key, (kind, args) in run.space.items())
    return [f"Tuned ablations: every arm searched with Optuna TPE, {run.budget} trials "
            f"each ({startup_trials(run.budget)} random first), FIFO, on {run.metric}, "
            f"at seed {run.seed} (no evaluation seed); over {ranges}. Then every arm at "
            "its own best at the evaluation seeds. The evaluation at the configuration "
            "given:"]


@singledispatch
def describe(design: Design, trials: Sequence[Any], base: TrialConfig,
             skipped: Sequence[tuple[Any, str]]) -> list[str]:
    """What ``--dry-run`` prints after its first line."""
    return [describe_trials(trials, base, skipped)]


@describe.register
def _(design: Search, trials: Sequence[Any], base: TrialConfig,
      skipped: Sequence[tuple[Any, str]]) -> list[str]:
    hpo = design.search
    lines = [f"{hpo.num_samples} sampled trials ({hpo.scheduler} scheduler) over:"]
    lines += [f"  {field}: {kind} {values}" for field, (kind, values) in hpo.space.items()]
    return [*lines, describe_trials([], base)]


# what planning records of a systems setting it mapped (ablations/config/safety.py): the
# setting asked for, beside the one it runs with
REQUESTED = {"compile_requested": "compile", "precision_requested": "precision"}


def describe_trials(trials: Sequence[Any], base: TrialConfig,
                    skipped: Sequence[tuple[Any, str]] = ()) -> str:
    """The dry-run listing: the base config once, then each trial and what differs from it,
    then the skipped cells with their reasons."""
    lines = [f"{len(trials)} trials" + (f" ({len(skipped)} more skipped)" if skipped else "")
             + ". Base configuration:"]
    shown = base.flat()
    for key, value in shown.items():
        # a requested setting only where it was mapped: the base runs with another
        mapped = key in REQUESTED and value and value != shown[REQUESTED[key]]
        if key not in ("ablation", "seed", *REQUESTED) or mapped:
            lines.append(f"  {key}: {value}")
    lines.append("Trials (name: differences from the base):")
    for index, spec in enumerate(trials, 1):
        diff = spec.config.diff(base)
        flat = spec.config.flat()
        for key in ("ablation", "seed", *REQUESTED):
            diff.pop(key, None)
        # a setting --resolve-conflicts mapped: the value it runs with, and what was asked
        diff.update({key: flat[key] for key, setting in REQUESTED.items()
                     if flat[key] and flat[key] != flat[setting]})
        shown = ", ".join(f"{k}={v}" for k, v in diff.items()) or "(base)"
        lines.append(f"  {index:>3}. {spec.name:<32} {shown}")
    if skipped:
        lines.append("Skipped (conflicts with this device or data; not run):")
        for spec, reason in skipped:
            lines.append(f"   SKIP {spec.name:<32} {reason}")
    return "\n".join(lines)


# ------------------------------------------------------------------ after the run


@singledispatch
def summary_lines(design: Design, trials_df: Any, meta: dict[str, Any],
                  settings: dict[str, Any]) -> list[str]:
    """Lines printed after the summary's table (``meta``: experiment.json; ``settings``: the
    summary's reference, metric, margin and alpha)."""
    return []


@summary_lines.register
def _(design: Factorial, trials_df: Any, meta: dict[str, Any],
      settings: dict[str, Any]) -> list[str]:
    try:
        table = factorial_effects_of(trials_df, meta, **settings)
    except (ValueError, KeyError) as exc:
        return ["", f"No factorial effects: {exc}"]
    return ["", f"Factorial effects ({design.factorial.legend()}):",
            effects_view(table).to_string(index=False), "", factorial_note(table)]


@summary_lines.register
def _(design: Stages, trials_df: Any, meta: dict[str, Any],
      settings: dict[str, Any]) -> list[str]:
    try:
        table = tuned_comparison_of(trials_df, meta, **settings)
    except (ValueError, KeyError) as exc:
        return [f"\nNo tuned comparison: {exc}"]
    return ["", *side_by_side_text(table).splitlines()]


@singledispatch
def closing_lines(design: Design, directory: Any) -> list[str]:
    """Lines printed after the summary (e.g. where the best configuration is)."""
    return []


@closing_lines.register
def _(design: Search, directory: Any) -> list[str]:
    if not is_file(join(directory, BEST_CONFIG_FILE)):
        return []
    return [f"Best configuration: {join(directory, BEST_CONFIG_FILE)} (use it with "
            f"--config); Optuna study: {join(directory, OPTUNA_FILE)} (SQLite)"]


# ------------------------------------------------------------------ --resume


def continued_line(design: Rounds, name: str, space: str, seeds: Sequence[int]) -> str:
    """What continuing the fixed run ``name`` into rounds (``design``) will do, in one line."""
    run = design.run
    looks = ", ".join(str(n) for n in run.design.looks)
    return (f"Continuing experiment {name} ({space}) with --seeds auto: its "
            f"{len(run.current_trials())} trials at seeds {', '.join(map(str, seeds))} are the "
            f"pilot (round 1, kept, not run again); looks at {looks} seeds per variant")


@singledispatch
def resume_line(design: Design, name: str, space: str, target: str, trials: Sequence[Any],
                retry_failed: bool) -> str:
    """What the resume of experiment ``name`` (space ``space``, folder ``target``, its
    recorded ``trials``) will do, in one line."""
    counts = counts_line(target, trials, None, retry_failed)
    return f"Resuming experiment {name} ({space}): {counts}"


@resume_line.register
def _(design: Search, name: str, space: str, target: str, trials: Sequence[Any],
      retry_failed: bool) -> str:
    counts = counts_line(target, trials, design.search, retry_failed)
    return f"Resuming experiment {name} ({space}): {counts}"


@resume_line.register
def _(design: Rounds, name: str, space: str, target: str, trials: Sequence[Any],
      retry_failed: bool) -> str:
    run = design.run  # the round a stop cut short, in its own Tune folder
    tune_subdir = run.rounds[-1]["tune"] if run.rounds else None
    counts = counts_line(target, run.current_trials(), None, retry_failed, tune_subdir)
    return f"Resuming experiment {name} ({space}): {counts}"


@resume_line.register
def _(design: Stages, name: str, space: str, target: str, trials: Sequence[Any],
      retry_failed: bool) -> str:
    tuned = design.run
    pending = tuned.pending()
    if pending is None:
        outlook = "every stage has ended; nothing to run"
    else:
        number, stage, arm = pending
        trials = (list(tuned.plan.values()) if stage == "evaluation" else
                  tuned.tuned_trials() if arm is None else [])
        search = SimpleNamespace(num_samples=tuned.budget) if arm is not None else None
        counts = counts_line(target, trials, search, retry_failed, tuned.tune_subdir(stage))
        outlook = f"stage {number} of {len(tuned.steps())} ({stage}): {counts}"
    return f"Resuming experiment {name} ({space}, tuned ablations): {outlook}"


def counts_line(target: str, trials: Sequence[Any], search: Any, retry_failed: bool,
                tune_subdir: Optional[str] = None) -> str:
    """How many trials are finished, continue, start (Tune's saved state); ``search``: a
    search's (its ``num_samples``), None for fixed trials; ``tune_subdir``: the Tune folder
    to continue."""
    counts = resume_counts(target, trials, retry_failed=retry_failed,
                           num_samples=search.num_samples if search else None,
                           tune_subdir=tune_subdir or TUNE_SUBDIR)
    one = {"continue": counts["continue"] == 1, "start": counts["start"] == 1}
    parts = [f"{counts['finished']} finished (kept)"]
    if counts["failed"]:
        parts.append(f"{counts['failed']} failed (kept; --retry-failed retries them)")
    parts.append(f"{counts['continue']} "
                 + ("continues from its" if one["continue"] else "continue from their")
                 + " last saved epoch")
    parts.append(f"{counts['start']} " + ("starts" if one["start"] else "start"))
    return ", ".join(parts)
