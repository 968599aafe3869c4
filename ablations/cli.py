"""Command line: ``python run_ablations.py --space components``.

Every bad input (flag, YAML key or value, data directory, experiment name) is caught before any
trial starts and reported as one line on stderr with exit code 2, no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import math
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence

from ablations.batches import scalar_columns
from ablations.config import ConfigError, TrialConfig, parse_bool
from ablations.planning import (
    UsageError,
    _spec_for,
    base_config,  # noqa: F401 (re-exported: callers and tests use cli.base_config)
    plan_trials,  # noqa: F401 (re-exported)
    prepare,
    with_null_control,  # noqa: F401 (re-exported)
)
from model.data import DataError
from results.io import MetadataError, filesystem, is_file, is_uri, join, list_dir, read_metadata

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C
DEFAULT_STORAGE = "ablation_results"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (``prog: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


# ------------------------------------------------------------------------------ flag types


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _resource(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _seeds(text: str) -> list[int] | str:
    """``3`` means seeds 0,1,2; ``0,5,7`` is an explicit list; ``auto``: in rounds."""
    text = text.strip()
    if text == "auto":
        return text
    try:
        if "," in text:
            seeds = [int(part) for part in text.split(",") if part.strip()]
        else:
            count = int(text)
            if count < 1:
                raise argparse.ArgumentTypeError(f"{text!r}: the number of seeds must be >= 1")
            seeds = list(range(count))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a count (3), a list of seeds (0,1,2) or auto"
        ) from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seeds must be distinct integers >= 0")
    return seeds


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def _bool_flag(text: str) -> bool:
    try:
        return parse_bool(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="run_ablations.py",
        description="Run ablations of the multimodal regression model on Ray Tune; results in "
        "Parquet under STORAGE/NAME/.",
    )
    what = parser.add_argument_group("what to run")
    what.add_argument("--space", default="components",
                      help="search space to run (see --list; default: components)")
    what.add_argument("--model", default=None, metavar="PACKAGE.MODULE:NAME",
                      help="a model plugin to ablate instead of the built-in model "
                      "(docs/plugins.md), e.g. examples.conv3d:PLUGIN; a space file's model: "
                      "key does the same")
    what.add_argument("--only", default=None, metavar="VARIANT[,VARIANT]",
                      help="run only these variants of the space")
    what.add_argument("--seeds", type=_seeds, default=[0, 1, 2], metavar="N|S1,S2,...|auto",
                      help="number of seeds (3 = seeds 0,1,2) or an explicit list; the same "
                      "seeds run for every variant (default: 3). auto: a pilot of --pilot "
                      "seeds, then more seeds in rounds only for variants without a verdict, "
                      "up to --max-seeds (README: Verdicts)")
    what.add_argument("--pilot", type=_int_at_least(2), default=None, metavar="N",
                      help="with --seeds auto: seeds of the first round (default: 3)")
    what.add_argument("--max-seeds", type=_int_at_least(2), default=None, metavar="N",
                      help="with --seeds auto: at most N seeds per variant (default: 10)")
    what.add_argument("--null-control", action="store_true",
                      help="add <reference>_repeat: the reference under other seeds (training "
                      "seed + 1000, paired by seed), a variant whose true effect is 0")
    what.add_argument("--epochs", type=_positive_int, default=None, help="epochs per trial")
    what.add_argument("--config", default=None, metavar="FILE.yaml|PRESET",
                      help="base configuration: a YAML mapping of config keys, or a preset "
                      "name (full_optimized, full_stable, memory_optimized)")
    what.add_argument("--set", dest="overrides", type=_key_value, action="append", default=[],
                      metavar="KEY=VALUE", help="override one config key (repeatable)")
    what.add_argument("--num-samples", type=_positive_int, default=16, metavar="N",
                      help="trials to sample in a search space such as hpo (default: 16)")
    what.add_argument("--scheduler", choices=["asha", "fifo"], default=None,
                      help="trial scheduler of a search space (default asha for hpo); ablation "
                      "spaces run every trial to the same budget and refuse one")
    what.add_argument("--resume", action="store_true",
                      help="continue the experiment --name (default: the newest in --storage) "
                      "from where it stopped; finished trials are kept")
    what.add_argument("--retry-failed", action="store_true",
                      help="with --resume: retry failed trials from their last checkpoint")
    what.add_argument("--allow-changed", action="store_true",
                      help="resume (--resume, or the same --name) even though the code or the "
                      "data changed since the experiment started; what changed is printed and "
                      "kept in experiment.json")
    what.add_argument("--resolve-conflicts", action="store_true",
                      help="map unsafe switch combinations to the nearest safe setting (with a "
                      "warning) instead of refusing them")
    what.add_argument("--auto-batch", action="store_true",
                      help="probe the largest batch whose training step fits the trial's GPU "
                      "(one step per size, on a worker with the trial's resources) and use it")
    what.add_argument("--diagnose", action="store_true",
                      help="print devices, free/total memory, what this torch supports, Ray "
                      "resources and a suggested command, then exit")
    what.add_argument("--list", action="store_true", help="list spaces and variants, then exit")
    what.add_argument("--dry-run", action="store_true",
                      help="print the trials and their resolved configs; run nothing")
    what.add_argument("--margin", type=_margin, default=None, metavar="M|P%",
                      help="equivalence margin of the end-of-run verdicts: metric units (0.02) "
                      "or a share of the reference's mean (default 5%%)")
    what.add_argument("--alpha", type=_alpha, default=0.05,
                      help="family-wise error rate of the verdicts (default 0.05)")
    what.add_argument("--metric", type=_metric, default="test_mae",
                      help="the metric of the verdicts (and of --seeds auto's decisions), a "
                      "numeric column of trials.parquet such as test_rmse, test_nll, val_mae "
                      "(default: test_mae)")
    data = parser.add_argument_group("data")
    data.add_argument("--data", default=None, metavar="DIR",
                      help="directory with images.npy and table.parquet (default: synthetic)")
    data.add_argument("--max-train-examples", type=_non_negative_int, default=None, metavar="N",
                      help="use at most N training samples (0: all)")
    data.add_argument("--max-eval-examples", type=_non_negative_int, default=None, metavar="N",
                      help="use at most N validation and N test samples (0: all)")
    where = parser.add_argument_group("where and how")
    where.add_argument("--address", default=None,
                       help="existing Ray cluster: 'auto' or ray://host:port "
                       "(default: start a local Ray)")
    where.add_argument("--storage", default=DEFAULT_STORAGE, metavar="DIR|URI",
                       help=f"results root: a path or a URI such as s3://bucket/results "
                       f"(default: ./{DEFAULT_STORAGE})")
    where.add_argument("--name", default=None,
                       help="experiment name (default: SPACE-YYYYmmdd-HHMMSS)")
    where.add_argument("--cpus-per-trial", type=_resource, default=1.0, metavar="N",
                       help="CPUs per trial; the trial uses that many threads (default: 1)")
    where.add_argument("--gpus-per-trial", type=_resource, default=0.0, metavar="N",
                       help="GPUs per trial, fractions allowed, e.g. 0.5 (default: 0)")
    where.add_argument("--max-concurrent", type=_non_negative_int, default=0, metavar="N",
                       help="at most N trials at once (default 0: as resources allow)")
    where.add_argument("--max-failures", type=_non_negative_int, default=0, metavar="N",
                       help="retry a failed trial up to N times, from its last checkpoint "
                       "(default: 0)")
    where.add_argument("--dashboard", type=_bool_flag, default=True, metavar="BOOL",
                       help="start the Ray dashboard on 127.0.0.1 with a local Ray "
                       "(default: true)")
    where.add_argument("--no-dashboard", dest="dashboard", action="store_false",
                       help="same as --dashboard false")
    where.add_argument("--quiet", action="store_true", help="no line per finished trial")
    where.add_argument("--verbose", action="store_true",
                       help="Ray Tune's live trial table and per-trial results")
    return parser


# ------------------------------------------------------------------------------ building


def list_spaces() -> str:
    from search_spaces import SPACES

    lines = []
    for space in SPACES.values():
        lines.append(f"{space.name}: {space.description}")
        if space.search:
            for field, (kind, values) in space.search.items():
                lines.append(f"  {field:<24} {kind} {values}")
        variants = space.variants
        if space.variants_from_data is not None:
            variants = space.table(scalar_columns(TrialConfig()))
            lines.append("  (generated from the data's scalar columns; on the synthetic data:)")
        for variant, diff in variants.items():
            shown = ", ".join(f"{k}={v}" for k, v in diff.items()) or "(reference)"
            lines.append(f"  {variant:<24} {shown}")
    return "\n".join(lines)


def describe_trials(trials: Sequence[Any], base: TrialConfig,
                    skipped: Sequence[tuple[Any, str]] = ()) -> str:
    """The dry-run listing: the base config once, then each trial and what differs from it,
    then the skipped cells with their reasons."""
    lines = [f"{len(trials)} trials" + (f" ({len(skipped)} more skipped)" if skipped else "")
             + ". Base configuration:"]
    for key, value in base.to_dict().items():
        if key not in ("ablation", "seed"):
            lines.append(f"  {key}: {value}")
    lines.append("Trials (name: differences from the base):")
    for index, spec in enumerate(trials, 1):
        diff = spec.config.diff(base)
        diff.pop("ablation", None)
        diff.pop("seed", None)
        shown = ", ".join(f"{k}={v}" for k, v in diff.items()) or "(base)"
        lines.append(f"  {index:>3}. {spec.name:<32} {shown}")
    if skipped:
        lines.append("Skipped (conflicts with this device or data; not run):")
        for spec, reason in skipped:
            lines.append(f"   SKIP {spec.name:<32} {reason}")
    return "\n".join(lines)


def summary_table(trials_df: Any, *, reference: str = "baseline", metric: str = "test_mae",
                  margin: str | float = "5%", alpha: float = 0.05,
                  sequential: Optional[dict[str, Any]] = None) -> str:
    """Per variant: ok/total trials (the seeds spent), mean ± std of the test MAE over ok
    trials, ...; where ``reference`` is a variant with an ok trial, also each variant's verdict
    against it on ``metric`` and the equivalence bound it reached
    (results.analysis.verdict_table), and a note under the table with the margin and alpha.
    ``sequential``: experiment.json's record of a ``--seeds auto`` run: the verdicts are the
    sequential design's, and the compute spent is compared with a fixed design."""
    import pandas as pd

    from results.analysis import verdict_note, verdict_table

    verdicts, no_verdicts = None, ""
    ok_reference = (trials_df["ablation"] == reference) & (trials_df["status"] == "ok")
    if ok_reference.any() and trials_df["ablation"].nunique() > 1:
        try:
            if sequential:
                from results.sequential import SeedDesign, sequential_verdict_table

                verdicts = sequential_verdict_table(
                    trials_df, SeedDesign.from_dict(sequential["design"]), sequential["seeds"],
                    reference=reference, metric=metric, margin=margin, alpha=alpha)
            else:
                verdicts = verdict_table(trials_df, reference=reference, metric=metric,
                                         margin=margin, alpha=alpha)
            verdicts = verdicts.set_index("ablation")
        except (ValueError, KeyError) as exc:  # e.g. a relative margin of a mean of 0
            no_verdicts = f"\n\nNo verdicts: {exc}"
    rows = []
    for ablation, group in trials_df.groupby("ablation", sort=False):
        ok = group[group["status"] == "ok"]
        mae = ok["test_mae"]
        rows.append({
            "ablation": ablation,
            "ok": f"{len(ok)}/{len(group)}",
            "test_mae_km": f"{mae.mean():.3f} ± {mae.std(ddof=1):.3f}" if len(mae) > 1
            else (f"{mae.mean():.3f}" if len(mae) else "-"),
            "test_rmse_km": f"{ok['test_rmse'].mean():.3f}" if len(ok) else "-",
            "test_coverage_90": f"{ok['test_coverage_90'].mean():.2f}"
            if len(ok) and ok["test_coverage_90"].notna().any() else "-",
            "samples_per_s": f"{ok['train_samples_per_s'].mean():.0f}" if len(ok) else "-",
            "peak_mem_mb": f"{ok['peak_mem_mb'].mean():.0f}" if len(ok) else "-",
            "wall_s": f"{group['wall_s'].mean():.1f}",
            "cpu_h": f"{group['cpu_hours'].sum():.3f}",
        })
        if verdicts is not None:
            bound = verdicts.loc[ablation, "equivalence_bound_holm"]
            rows[-1]["verdict"] = verdicts.loc[ablation, "verdict"]
            rows[-1]["equiv_bound"] = "-" if pd.isna(bound) else f"{bound:.3f}"
    table = pd.DataFrame(rows).to_string(index=False)
    if verdicts is None:
        return table + no_verdicts
    seeds = verdicts["n_ok"]
    spent = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
    text = (f"{table}\n\n{verdict_note(verdicts)} Seeds per variant: {spent} (ok column); "
            f"equiv_bound: equivalence_bound_holm.")
    if sequential:
        from results.sequential import SeedDesign, compute_note, compute_spent, design_note

        design = SeedDesign.from_dict(sequential["design"])
        text += (f"\n{design_note(design, alpha)}\n"
                 f"{compute_note(compute_spent(trials_df, design.max_seeds))}")
    return text


# ------------------------------------------------------------------------------ main


def _margin(text: str) -> str:
    """An equivalence margin flag: ``0.02`` (metric units) or ``5%`` (of the reference's mean)."""
    from results.analysis import parse_margin

    try:
        parse_margin(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _metric(text: str) -> str:
    """A numeric trials.parquet column the verdicts can be computed on."""
    from results.schema import TRIAL_COLUMNS

    numeric = [name for name, dtype, _ in TRIAL_COLUMNS
               if dtype == "float64" and name.startswith(("test_", "val_", "train_"))]
    if text not in numeric:
        raise argparse.ArgumentTypeError(f"{text!r} is not a metric column; choose one of: "
                                         f"{', '.join(numeric)}")
    return text


def _alpha(text: str) -> float:
    """A family-wise error rate in (0, 0.5)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number in (0, 0.5), e.g. 0.05")
    return value


def report_main(argv: Sequence[str]) -> int:
    """``run_ablations.py report EXPERIMENT_DIR``: write report.md/.html, print the table."""
    parser = OneLineParser(prog="run_ablations.py report",
                           description="Analyse an experiment folder: report.md, report.html "
                           "and figures in it; the ablation table on the terminal.")
    parser.add_argument("experiment", metavar="EXPERIMENT_DIR|URI",
                        help="an experiment folder, or its URI (file://..., s3://bucket/...)")
    parser.add_argument("--reference", default=None,
                        help="variant the others are compared with (default: the "
                        "experiment's, e.g. baseline)")
    parser.add_argument("--metric", default=None,
                        help="trials column to compare (default: test_mae, or what a --seeds "
                        "auto run decided on; e.g. test_rmse, test_nll, val_mae, test_r2: "
                        "worse/better follow its direction)")
    parser.add_argument("--margin", type=_margin, default=None, metavar="X|P%",
                        help="equivalence margin: in the metric's units (0.02) or a percentage "
                        "of the reference's mean (default: 5%%, or the run's with --seeds auto)")
    parser.add_argument("--alpha", type=_alpha, default=None,
                        help="family-wise error rate of each kind of verdict (default: 0.05, "
                        "or the run's with --seeds auto)")
    args = parser.parse_args(argv)
    import pyarrow as pa

    from results.report import markdown_table, write_report

    experiment = args.experiment if is_uri(args.experiment) \
        else str(Path(args.experiment).expanduser())
    try:
        report = write_report(experiment, reference=args.reference, metric=args.metric,
                              margin=args.margin, alpha=args.alpha)
    except (ValueError, KeyError, OSError, pa.ArrowException) as exc:
        # ValueError includes results.report.NotAnExperimentError; OSError: cannot write
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, OSError) and getattr(exc, "filename", None):
            message = f"{exc.filename}: {exc.strerror or message}"
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    metric = report.ablation.attrs["metric"]
    table = report.ablation[["ablation", "n_ok", f"{metric}_mean", "diff_mean",
                             "tost_ci_low", "tost_ci_high", "p_holm", "p_tost_holm",
                             "equivalence_bound_holm", "verdict"]]
    print(markdown_table(table))
    print(f"\n{report.note}")
    print(f"\nReport: {report.markdown} and {report.html}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        return report_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _main(args, ["run_ablations.py", *argv])
    except (ConfigError, DataError, UsageError, MetadataError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(args: argparse.Namespace, command: list[str]) -> int:
    if args.list:
        print(list_spaces())
        return 0
    if args.diagnose:
        return _diagnose(args)
    if args.address is not None and args.address != "auto" \
            and not re.match(r"^(ray://)?[\w.-]+:\d+$", args.address):
        raise UsageError(f"--address {args.address!r}: use 'auto', host:port or ray://host:port")
    storage = storage_root(args.storage)
    if args.retry_failed and not args.resume:
        raise UsageError("--retry-failed only applies with --resume")
    if args.resume:
        return _resume(args, storage, command)

    prepared = prepare(args)
    space, base, trials, skipped = (prepared.space, prepared.base, prepared.trials,
                                    prepared.skipped)
    notes, data_summary, hpo, sequential = (prepared.notes, prepared.data_summary,
                                            prepared.hpo, prepared.sequential)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    name = args.name or f"{space.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if not NAME_PATTERN.match(name):
        raise UsageError(f"--name {name!r}: use letters, digits, '.', '_' and '-' only")
    target = join(storage, name)
    if args.dry_run:
        print(f"Experiment {name} (dry run): space {space.name}, seeds {args.seeds}")
        if sequential is not None:
            from results.sequential import design_note

            print(f"{design_note(sequential.design, args.alpha)} The pilot's trials:")
        if data_summary:
            print(f"Data: {data_summary}")
        if hpo is not None:
            print(f"{hpo.num_samples} sampled trials ({hpo.scheduler} scheduler) over:")
            for field, (kind, values) in hpo.space.items():
                print(f"  {field}: {kind} {values}")
            print(describe_trials([], base))
        else:
            print(describe_trials(trials, base.replace(ablation=space.reference), skipped))
        return 0
    resume = False
    if list_dir(target):
        previous = read_metadata(target)
        if previous is None:
            raise UsageError(f"{target} already exists and is not an experiment of this tool; "
                             "choose another --name or --storage")
        from ablations.runner import skipped_plan, trial_plan

        recorded = previous.get("auto_batch")
        if args.auto_batch and recorded:  # the same command again: the size it chose then
            trials = [dataclasses.replace(spec, config=spec.config.replace(
                batch_size=recorded["micro_batch"] * spec.config.grad_accum_steps))
                for spec in trials]
        planned = previous.get("trials")
        if (sequential is None) != (not previous.get("sequential")):
            was = "--seeds auto" if previous.get("sequential") else "fixed seeds"
            raise UsageError(f"{target} holds an experiment run with {was}; continue it with "
                             "--resume or choose another --name")
        if sequential is not None:  # the whole table up to --max-seeds, and the design
            planned = previous["sequential"].get("plan")
            trials = list(sequential.plan.values())
            recorded = previous["sequential"]
            decided = (recorded["metric"], str(recorded["margin"]), float(recorded["alpha"]))
            if decided != (sequential.metric, str(sequential.margin), sequential.alpha):
                raise UsageError(f"{target} decides its rounds on metric {decided[0]}, margin "
                                 f"{decided[1]}, alpha {decided[2]:g}; give those (or --resume, "
                                 "which keeps them) or choose another --name")
        same = (previous.get("space") == space.name
                and planned == trial_plan(trials)
                and (sequential is None or previous["sequential"]["design"]
                     == sequential.design.to_dict())
                and previous.get("skipped") == skipped_plan(skipped)
                and (hpo is None) == (previous.get("hpo") is None))
        if not same:
            raise UsageError(f"{target} holds a different experiment (space "
                             f"{previous.get('space')}, {len(previous.get('trials', {}))} "
                             "trials); continue it with --resume or choose another --name")
        check_unchanged(previous, [s.config for s in [*trials, *(t for t, _ in skipped)]]
                        or [base], args.allow_changed)
        print(f"Experiment {name} exists with the same plan: resuming it.")
        resume = True
        if sequential is not None:
            from ablations.rounds import SequentialRun

            sequential = SequentialRun.from_record(previous["sequential"])
            trials = sequential.current_trials()
    return _run(args, space.name, trials, skipped, storage, name, command, hpo=hpo,
                resume=resume, reuse_workers=not space.isolate_trials, sequential=sequential,
                reference=space.reference)


def storage_root(text: str) -> str:
    """--storage as a local absolute path or a URI (s3://, gs://, file://, ...)."""
    if is_uri(text):
        try:
            filesystem(text)
        except (ValueError, OSError, ImportError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"--storage {text}: {first}") from None
        return text.rstrip("/")
    storage = Path(text).expanduser().resolve()
    if storage.exists() and not storage.is_dir():
        raise UsageError(f"--storage {storage} is a file, not a directory")
    return str(storage)


def _resume(args: argparse.Namespace, storage: str, command: list[str]) -> int:
    """Continue an experiment from its experiment.json and Ray Tune's state."""
    from ablations.runner import HpoSearch, plan_from_metadata
    from search_spaces import SPACES

    name = args.name
    if name is not None and not NAME_PATTERN.match(name):  # a name, never a path
        raise UsageError(f"--name {name!r}: use letters, digits, '.', '_' and '-' only "
                         "(the experiment's folder is --storage/NAME)")
    if name is None:
        started = {}
        for entry in list_dir(storage):
            try:
                meta = read_metadata(join(storage, entry))
            except MetadataError:  # a damaged record: not the experiment to continue
                continue
            if meta is not None:
                started[entry] = max([meta.get("started_at", ""), *meta.get("resumed_at", [])])
        if not started:
            raise UsageError(f"--resume: no experiment in {storage}; pass --name or --storage")
        name = max(started, key=started.get)
    target = join(storage, name)
    meta = read_metadata(target)
    if meta is None:
        raise UsageError(f"--resume: {target} is not an experiment folder (no experiment.json)")
    trials, skipped = plan_from_metadata(meta)
    sequential, tune_subdir = None, None
    if meta.get("sequential"):
        from ablations.rounds import SequentialRun

        sequential = SequentialRun.from_record(meta["sequential"])
        tune_subdir = sequential.rounds[-1]["tune"] if sequential.rounds else None
    hpo = None
    if meta.get("hpo"):
        h = meta["hpo"]
        hpo = HpoSearch(base=TrialConfig.from_dict(h["base"]),
                        space={k: (kind, tuple(v) if isinstance(v, list) else v)
                               for k, (kind, v) in h["space"].items()},
                        num_samples=h["num_samples"], metric=h["metric"], mode=h["mode"],
                        scheduler=h["scheduler"])
    check_unchanged(meta, [s.config for s in [*trials, *(t for t, _ in skipped)]]
                    + ([hpo.base] if hpo else []), args.allow_changed)
    args.cpus_per_trial = meta.get("cpus_per_trial", args.cpus_per_trial)
    args.gpus_per_trial = meta.get("gpus_per_trial", args.gpus_per_trial)
    args.seeds = meta.get("seeds", args.seeds)
    current = sequential.current_trials() if sequential is not None else trials
    print(f"Resuming experiment {name} ({meta['space']}): "
          f"{resume_outlook(target, current, hpo, args.retry_failed, tune_subdir)}")
    space = SPACES.get(meta["space"])
    return _run(args, meta["space"], current, skipped, storage, name, command, hpo=hpo,
                resume=True, reuse_workers=not (space and space.isolate_trials),
                sequential=sequential,
                reference=meta.get("reference") or (space.reference if space else "baseline"))


def resume_outlook(target: str, trials: Sequence[Any], hpo: Any, retry_failed: bool,
                   tune_subdir: Optional[str] = None) -> str:
    """One line: how many trials are finished, continue, start (Tune's saved state);
    ``tune_subdir``: the Tune folder of the round to continue (--seeds auto)."""
    from ablations.runner import TUNE_SUBDIR, resume_counts

    counts = resume_counts(target, trials, retry_failed=retry_failed,
                           num_samples=hpo.num_samples if hpo else None,
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


def check_unchanged(meta: dict[str, Any], configs: Sequence[TrialConfig],
                    allow_changed: bool) -> None:
    """Before resuming: refuse (one line) when the code or the data changed since the
    experiment started, unless ``allow_changed``; then print what changed and what else differs
    (packages, device, commit). ``experiment.json`` keeps it (``resume_history``)."""
    from ablations.provenance import changes, collect

    try:
        current = collect(configs)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot fingerprint the data to compare it with the experiment's: "
                         f"{first}") from None
    blocking, notes = changes(meta.get("provenance"), current)
    if blocking and not allow_changed:
        raise UsageError(f"experiment {meta.get('experiment')} cannot be resumed: changed since "
                         f"it started: {'; '.join(blocking)}; restore them, run under a new "
                         "--name, or pass --allow-changed to continue anyway")
    for line in blocking:
        print(f"warning: resuming although it changed (--allow-changed): {line}",
              file=sys.stderr)
    if notes:
        print(f"note: since the experiment started: {'; '.join(notes)}", file=sys.stderr)


def _run(args: argparse.Namespace, space_name: str, trials: list[Any], skipped: list[Any],
         storage: str, name: str, command: list[str], *, hpo: Any = None,
         resume: bool = False, reuse_workers: bool = True, sequential: Any = None,
         reference: str = "baseline") -> int:
    import ray

    from ablations.cluster import ClusterUnreachable, job_runtime_env
    from ablations.runner import RunOptions, init_ray, resume_command, run_experiment

    options = RunOptions(
        storage=storage, name=name, space=space_name, reference=reference,
        address=args.address,
        cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
        max_concurrent=args.max_concurrent, max_failures=args.max_failures,
        retry_failed=args.retry_failed, reuse_workers=reuse_workers, dashboard=args.dashboard,
        verbose=1 if args.verbose else 0, progress=not args.quiet, command=command,
    )
    if not args.address and job_runtime_env() is not None:
        raise UsageError("running as a Ray job without --address: this would start a private "
                         "Ray on one node; pass --address auto to use the job's cluster")
    try:
        started_ray, dashboard_url = init_ray(options)
    except ClusterUnreachable as exc:
        raise UsageError(str(exc)) from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot connect to Ray at {args.address or 'local'}: {first}") from None
    # Ray's driver exits on SIGTERM (code 15, no word); before and after Tuner.fit (where
    # run_experiment hands it to Tune's stop) it is Ctrl-C: stop, say how to continue.
    sigterm = _sigterm_is_ctrl_c()
    try:
        resources = ray.cluster_resources()
        count = f"{hpo.num_samples} sampled trials" if hpo else \
            f"{len(trials)} trials ({len({s.variant for s in trials})} variants x " \
            f"{len(args.seeds)} seeds)"
        if sequential is not None:
            looks = sequential.design.looks
            count = (f"{len({s.variant for s in sequential.plan.values()})} variants, seeds in "
                     f"rounds ({looks[0]} seeds, then up to {looks[-1]} where no verdict yet)")
        print(f"Experiment {name}: space {space_name}, {count}, "
              f"{args.cpus_per_trial:g} CPU + {args.gpus_per_trial:g} GPU per trial, "
              f"Ray with {resources.get('CPU', 0):g} CPUs / {resources.get('GPU', 0):g} GPUs")
        if args.cpus_per_trial > resources.get("CPU", 0) or \
                args.gpus_per_trial > resources.get("GPU", 0):
            raise UsageError(
                f"a trial asks for {args.cpus_per_trial:g} CPU / {args.gpus_per_trial:g} GPU but "
                f"the cluster has {resources.get('CPU', 0):g} / {resources.get('GPU', 0):g}; "
                "lower --cpus-per-trial / --gpus-per-trial"
            )
        if args.address:
            check_data_on_workers(trials or [_spec_for(hpo.base)], args)
        if dashboard_url:
            print(f"Ray dashboard: http://{dashboard_url.removeprefix('http://')} "
                  "(token authentication: `ray get-auth-token` prints the token)")
        print(f"Results: {join(storage, name)}")
        print(f"TensorBoard: tensorboard --logdir "
              f"{join(storage, name) if sequential else join(storage, name, 'tune')}")
        if args.auto_batch and trials and not resume:  # a resume keeps the size it recorded
            trials, options.auto_batch = _auto_batch(args, trials)
        if sequential is not None:
            from ablations.rounds import run_rounds

            result, _ = run_rounds(sequential, options, skipped, resume=resume,
                                   root=join(storage, name))
        else:
            result = run_experiment(trials, options, skipped=skipped, hpo=hpo, resume=resume)
    except KeyboardInterrupt:  # a second Ctrl-C / SIGTERM, or one outside Tuner.fit
        print(f"\nInterrupted before the results were written; continue with: "
              f"{resume_command(storage, name, args.address)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        if started_ray:
            ray.shutdown()
    df = result.trials
    print()
    # verdicts against the reference at the margin and alpha of the run's flags
    if sequential is not None:  # the decisions' own margin, alpha and metric
        print(summary_table(df, reference=sequential.reference, metric=sequential.metric,
                            margin=sequential.margin, alpha=sequential.alpha,
                            sequential=sequential.record()))
    else:
        print(summary_table(df, reference=reference, metric=args.metric,
                            margin=args.margin or "5%", alpha=args.alpha))
    counts = df["status"].value_counts().to_dict()
    unfinished = counts.get("interrupted", 0) + counts.get("not_started", 0)
    stopped = (f"{counts.get('interrupted', 0)} interrupted, "
               f"{counts.get('not_started', 0)} not started, ") if unfinished else ""
    print(f"\n{counts.get('ok', 0)} ok, {counts.get('failed', 0)} failed, "
          f"{counts.get('diverged', 0)} diverged, {counts.get('stopped', 0)} stopped early, "
          f"{stopped}{counts.get('skipped', 0)} skipped of {len(df)} trials; "
          f"{result.wall_s:.0f} s wall, {df['cpu_hours'].sum():.3f} CPU-hours, "
          f"{df['gpu_hours'].sum():.3f} GPU-hours.")
    for _, row in df[df["status"].isin(["failed", "diverged"])].iterrows():
        print(f"  {row['trial_name']}: {row['status']}: {row['error']}")
    if hpo is not None and is_file(join(result.directory, "best_config.yaml")):
        print(f"Best configuration: {join(result.directory, 'best_config.yaml')} (use it with "
              f"--config); Optuna study: {join(result.directory, 'optuna.db')} (SQLite)")
    print(f"Results in {result.directory}: trials.parquet, epochs.parquet, predictions.parquet")
    if unfinished:
        print(f"Interrupted: {unfinished} trials did not finish; continue with: "
              f"{resume_command(storage, name, args.address)}")
        return EXIT_INTERRUPTED
    return 0 if counts.get("ok", 0) else 1


def _sigterm_is_ctrl_c() -> Any:
    """SIGTERM raises KeyboardInterrupt from now on (main thread only); returns the handler
    to restore, None when not in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return signal.SIG_DFL if previous is None else previous  # None: set outside Python


def check_data_on_workers(trials: Sequence[Any], args: argparse.Namespace) -> None:
    """On a cluster, the data directory must be visible from every node that can run a trial
    (an alive node with a trial's CPUs and GPUs): each is asked, pinned to it."""
    import ray
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    dirs = sorted({spec.config.data_dir for spec in trials if spec.config.data_dir})
    if not dirs:
        return

    def visible(paths: list[str]) -> tuple[str, list[str]]:
        import os as _os
        import platform as _platform

        return _platform.node(), [p for p in paths if not _os.path.isdir(p)]

    nodes = [node for node in ray.nodes() if node.get("Alive")
             and node["Resources"].get("CPU", 0) >= args.cpus_per_trial
             and node["Resources"].get("GPU", 0) >= args.gpus_per_trial]
    probe, probes = ray.remote(num_cpus=0)(visible), {}
    for node in nodes:
        name = f"{node['NodeManagerAddress']}, node {node['NodeID'][:8]}"
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        probes[name] = probe.options(scheduling_strategy=strategy).remote(dirs)
    blind, failed = [], []
    ray.wait(list(probes.values()), num_returns=len(probes), timeout=120)  # all at once
    for name, pending in probes.items():
        try:
            host, missing = ray.get(pending, timeout=0.1)
        except (GetTimeoutError, RayError) as exc:
            lines = str(exc).strip().splitlines()
            failed.append(f"{name}: {lines[0] if lines else type(exc).__name__}")
            continue
        if missing:
            blind.append((f"{host} ({name})", missing[0]))
    if blind:
        raise UsageError(f"--data {blind[0][1]} is not visible on {len(blind)} of {len(nodes)} "
                         f"nodes that can run a trial: {'; '.join(n for n, _ in blind)}; put "
                         "the data on a path every node can read (a shared file system)")
    if failed:
        raise UsageError(f"cannot check --data on {len(failed)} node(s): {failed[0]}; check that "
                         "the project's dependencies are installed on every node")


def _auto_batch(args: argparse.Namespace, trials: list[Any]) -> tuple[list[Any], Optional[dict]]:
    """Probe on a worker holding one trial's resources; set every trial's batch size.
    Returns the trials and what was probed and chosen (for experiment.json)."""
    import ray

    from ablations.memory import auto_batch_limit, choose_micro_batch, probe_max_batch
    from ablations.train import load_data

    config = trials[0].config
    if config.device != "cuda" and not config.inject_oom_above_batch:
        print(f"auto-batch: trials run on {config.device}, which has no GPU memory to fit; "
              f"keeping batch_size={config.batch_size}")
        return trials, None
    datasets = {(c.data_dir, c.data_seed, c.synthetic_train, c.synthetic_val, c.synthetic_test,
                 c.max_train_examples, c.max_eval_examples): c for c in (s.config for s in trials)}
    train_samples = min(len(load_data(c).indices("train")) for c in datasets.values())
    limit = auto_batch_limit(train_samples, max(s.config.grad_accum_steps for s in trials))
    probe = ray.remote(num_cpus=args.cpus_per_trial, num_gpus=args.gpus_per_trial)(
        probe_max_batch)
    found = ray.get(probe.remote(config, limit=limit))
    micro, why = choose_micro_batch(found, limit)
    if micro < 1:
        raise UsageError(f"auto-batch: even batch 1 runs out of memory on {found['device']}; "
                         "use --config memory_optimized or fewer temporal_frames")
    sizes = ", ".join(f"{size}{'' if ok else ' OOM'}" for size, ok in found["probed"])
    out = []
    for spec in trials:  # the plan's constraints again, with the new size (ConfigError if not)
        batch = micro * spec.config.grad_accum_steps
        if batch > train_samples:
            raise UsageError(f"auto-batch: batch_size={batch} exceeds the {train_samples} "
                             "training samples; lower grad_accum_steps")
        out.append(dataclasses.replace(spec, config=spec.config.replace(batch_size=batch)))
    chosen = micro * config.grad_accum_steps
    print(f"auto-batch: batch_size={chosen} (micro-batch {micro} x {config.grad_accum_steps}), "
          f"limited by {why}; {train_samples // chosen} optimizer steps per epoch; "
          f"probed on {found['device']}: {sizes}")
    record = {"batch_size": chosen, "micro_batch": micro, "limited_by": why,
              "largest_fitting_micro_batch": found["batch"], "probe_limit": limit,
              "probed": found["probed"], "device": found["device"],
              "requested_batch_size": config.batch_size, "train_samples": train_samples}
    return out, record


def _diagnose(args: argparse.Namespace) -> int:
    import ray

    from ablations.memory import diagnose
    from ablations.cluster import check_cluster_address

    info = diagnose()
    print(f"python {info['python']}, torch {info['torch']}")
    print(f"CPU: {info['cpu_cores']} cores, RAM {info['ram_available_gib']} GiB available of "
          f"{info['ram_total_gib']} GiB")
    print(f"CPU support: bf16 autocast {info['cpu_bf16_autocast']}, fp16 autocast "
          f"{info['cpu_fp16_autocast']}, fused AdamW {info['cpu_fused_adamw']}, C++ compiler "
          f"for inductor {info['cpp_compiler_for_inductor']}")
    if info["gpus"]:
        for gpu in info["gpus"]:
            bf16 = "native" if gpu["bf16"] else \
                "emulated (slow: use fp16)" if gpu["bf16_emulated"] else "no"
            print(f"GPU {gpu['index']}: {gpu['name']}, {gpu['free_gib']} GiB free of "
                  f"{gpu['total_gib']} GiB, capability {gpu['capability']}, bf16 {bf16}, tf32 "
                  f"{'native' if gpu['tf32'] else 'no (needs capability 8.0)'}")
    else:
        print("GPU: none visible to torch (CUDA available: False)")
    try:
        if args.address:
            check_cluster_address(args.address)
            ray.init(address=args.address, logging_level=logging.WARNING)
        else:  # a private local Ray, as a run starts (ablations/runner.py init_ray)
            ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
        resources = ray.cluster_resources()
        print("Ray resources: " + ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items())
                                            if not k.startswith("node:")))
    except (ConnectionError, RuntimeError) as exc:
        print(f"Ray: cannot start or connect ({str(exc).splitlines()[0]})")
    finally:
        ray.shutdown()
    print(f"Suggested: {info['suggestion']}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
