"""Data: training from a file dataset larger than 4 GB; prints a markdown table.

    python benchmarks/data.py --gb 4.3                        # in a temporary folder, removed
    python benchmarks/data.py --dir /data/bench --gb 4.3      # kept in DIR, reused next time

Writes ``images.npy`` of N samples x 8 frames x 2 x 64 x 64 (``--size``) float32 and
``table.parquet`` (target, three scalars, a 70/15/15 split): in a temporary folder that is
removed at the end (also on an error or Ctrl-C), or in ``--dir``, where it is kept and reused
when the shape matches (``images.npy`` is renamed into place only once complete, so an
interrupted write is never reused). Then measures, each in a fresh process:

- loader: one epoch of training batches (32 samples, the 4 most recent frames, shuffled
  order) read and normalised as the trainer does, without the model: samples/s and MB/s; with
  the trainer's file reads and, for comparison, through the memory map;
- model step: forward + backward + AdamW step of the full model on batches of that shape
  (random data in memory), one untimed step then ``--model-steps`` timed ones: samples/s;
- training: ``train()`` on the file for one epoch over a seeded subset of the training split
  (``--train-examples``) and the validation and test splits capped at ``--eval-examples``.
For each: peak RSS (VmHWM) and, at the end, RSS split into anonymous memory (arrays, tensors)
and file pages mapped into the process (RssFile: a memory map's pages count here while they
stay mapped).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from common import machine, markdown, run_python

FRAMES, CHANNELS = 8, 2

MEMORY = """
def memory():
    out = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out
"""

LOADER = MEMORY + """
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from ablations.config import TrialConfig
from ablations.trial.loop import Batches, Normaliser, epoch_order, load_data
config = TrialConfig.of(data_dir=sys.argv[1], batch_size=32)
data = load_data(config)
if sys.argv[2] == "mmap":  # read batches through the memory map (what the trainer did before)
    data.images_file = ""
train_idx = data.indices("train")
batches = Batches(data, Normaliser.fit(data, train_idx), config, torch.device("cpu"))
order = epoch_order(train_idx, 0, 1)
t0 = time.perf_counter(); n = 0
for batch in batches.loader(order, 32):
    frames, _, _ = batches.to_device(batch)
    n += frames.shape[0]
seconds = time.perf_counter() - t0
print(json.dumps({"samples_per_s": n / seconds,
                  "mb_per_s": n * frames[0].numel() * 4 / seconds / 2**20,
                  "samples": n, **memory()}))
"""

STEP = MEMORY + """
import json, sys, time
import torch
torch.set_num_threads(1)
from ablations.model import ModelConfig, build_model
from ablations.trial.step import loss_fn
torch.manual_seed(0)
size = int(sys.argv[2])
model = build_model(ModelConfig(in_channels=2, image_height=size, image_width=size,
                                num_scalars=3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, s, y = torch.randn(32, 4, 2, size, size), torch.randn(32, 3), torch.randn(32)
def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(*model(x, s), y); loss.backward(); opt.step()
step()
t0 = time.perf_counter()
steps = int(sys.argv[1])
for _ in range(steps): step()
print(json.dumps({"samples_per_s": steps * 32 / (time.perf_counter() - t0), **memory()}))
"""

TRAIN = MEMORY + """
import json, sys
from ablations.config import TrialConfig
from ablations.trial.loop import train
config = TrialConfig.of(data_dir=sys.argv[1], epochs=1, batch_size=32, num_threads=1,
                     max_train_examples=int(sys.argv[2]), max_eval_examples=int(sys.argv[3]))
out = train(config)
print(json.dumps({"samples_per_s": out.metrics["steady_train_samples_per_s"],
                  "test_mae": out.metrics["test_mae"], **memory()}))
"""


def write_dataset(root: Path, samples: int, size: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    images_path, partial = root / "images.npy", root / "images.npy.partial"
    shape = (samples, FRAMES, CHANNELS, size, size)
    if images_path.exists() and (root / "table.parquet").exists() \
            and np.load(images_path, mmap_mode="r").shape == shape:
        return
    rng = np.random.default_rng(0)
    images = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=shape)
    chunk = 256
    for start in range(0, samples, chunk):
        stop = min(start + chunk, samples)
        images[start:stop] = rng.standard_normal((stop - start, *shape[1:]), dtype=np.float32)
    images.flush()
    del images
    split = rng.choice(["train", "val", "test"], size=samples, p=[0.7, 0.15, 0.15])
    table = pd.DataFrame({"target": rng.normal(5.0, 1.0, samples), "split": split,
                          **{f"scalar_{i}": rng.standard_normal(samples) for i in range(3)}})
    table.to_parquet(root / "table.parquet", index=False)
    os.replace(partial, images_path)  # complete: from now on it may be reused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None,
                        help="keep the dataset here and reuse it (default: a temporary folder, "
                        "removed at the end)")
    parser.add_argument("--gb", type=float, default=4.3, help="size of images.npy, 1e9 bytes")
    parser.add_argument("--train-examples", type=int, default=512)
    parser.add_argument("--eval-examples", type=int, default=128,
                        help="the cap on the validation and test splits in train()")
    parser.add_argument("--size", type=int, default=64, help="H = W of the frames")
    parser.add_argument("--model-steps", type=int, default=4,
                        help="timed model steps (after one untimed)")
    args = parser.parse_args()
    if args.dir is not None:
        return measure(Path(args.dir), args)
    with tempfile.TemporaryDirectory(prefix="ablation-bench-data-") as folder:
        return measure(Path(folder), args)


def measure(root: Path, args: argparse.Namespace) -> int:
    size = args.size
    samples = int(args.gb * 1e9 / (FRAMES * CHANNELS * size * size * 4)) + 1
    started = time.time()
    write_dataset(root, samples, size)
    size_gb = (root / "images.npy").stat().st_size / 1e9
    with open(root / "images.npy", "rb") as handle:  # into the page cache: time CPU, not disk
        while handle.read(64 << 20):
            pass
    loader = run_python(LOADER, str(root), "read")
    mapped = run_python(LOADER, str(root), "mmap")
    step = run_python(STEP, str(args.model_steps), str(size))
    trained = run_python(TRAIN, str(root), str(args.train_examples), str(args.eval_examples))
    rows = [
        ["loader alone (one epoch), file reads", loader["samples_per_s"],
         f"{loader['mb_per_s']:.0f}", loader["VmHWM"], loader["RssAnon"], loader["RssFile"]],
        ["loader alone (one epoch), memory map", mapped["samples_per_s"],
         f"{mapped['mb_per_s']:.0f}", mapped["VmHWM"], mapped["RssAnon"], mapped["RssFile"]],
        ["model step alone", step["samples_per_s"], "", step["VmHWM"], step["RssAnon"],
         step["RssFile"]],
        [f"train() {args.train_examples} examples, 1 epoch", trained["samples_per_s"], "",
         trained["VmHWM"], trained["RssAnon"], trained["RssFile"]],
    ]
    print(f"Machine: {machine()}")
    print(f"images.npy {size_gb:.2f} GB ({samples} samples x {FRAMES} x {CHANNELS} x {size} x "
          f"{size} float32), read once into the page cache first; batch 32, 4 frames, 1 thread; "
          f"{time.time() - started:.0f} s in all.\n")
    print(markdown(["what", "samples/s", "MB/s read", "peak RSS MiB", "anon MiB at end",
                    "file-mapped MiB at end"], rows))
    print(f"\nloader / model step: {loader['samples_per_s'] / step['samples_per_s']:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
