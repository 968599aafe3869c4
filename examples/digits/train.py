"""A small classifier of scikit-learn's bundled 8x8 digits (no download), in plain PyTorch: a
training script as a user writes it, which the runner ablates through ``--command``
(docs/own-code.md).

    python examples/digits/train.py --epochs 8 --metrics-file /tmp/metrics.jsonl

Each epoch appends {"epoch", "train_loss", "val_acc", "val_loss"} to --metrics-file (a JSON
line; stdout without one), and saves a checkpoint in --resume-dir, from which a restarted run
continues; the last line holds {"test_acc", "test_loss"}. About 2 s for 8 epochs on one thread.
"""

import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn


def boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: give true or false")
    return text.lower() == "true"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=64, help="width of each hidden layer")
    parser.add_argument("--layers", type=int, default=2, choices=(1, 2), help="hidden layers")
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--augment", type=boolean, default=True,
                        help="true: shift each training image by up to one pixel")
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01, help="Adam's learning rate")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="initialization, order, shifts")
    parser.add_argument("--data-seed", type=int, default=0, help="the train/val/test split")
    parser.add_argument("--metrics-file", default=None, help="JSON lines; stdout without one")
    parser.add_argument("--resume-dir", default=None, help="checkpoint folder; none without")
    return parser.parse_args()


def splits(data_seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """60/20/20 train/val/test: images (N, 8, 8) in [0, 1] and labels (N,)."""
    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32)
    labels = torch.tensor(digits.target)
    order = torch.tensor(np.random.default_rng(data_seed).permutation(len(labels)))
    cut = [int(0.6 * len(order)), int(0.8 * len(order))]
    parts = dict(zip(("train", "val", "test"), torch.tensor_split(order, cut)))
    return {name: (images[index], labels[index]) for name, index in parts.items()}


def model_of(args: argparse.Namespace) -> nn.Module:
    widths = [64] + [args.hidden] * args.layers
    layers: list[nn.Module] = [nn.Flatten()]
    for width_in, width_out in zip(widths, widths[1:]):
        layers += [nn.Linear(width_in, width_out), nn.ReLU(), nn.Dropout(args.dropout)]
    return nn.Sequential(*layers, nn.Linear(widths[-1], 10))


def shifted(images: torch.Tensor) -> torch.Tensor:
    """Each image (B, 8, 8) moved by -1, 0 or +1 pixels in each direction, zeros filling in."""
    padded = F.pad(images, (1, 1, 1, 1))  # (B, 10, 10)
    dy, dx = torch.randint(0, 3, (2, len(images))).tolist()
    return torch.stack([image[y:y + 8, x:x + 8] for image, y, x in zip(padded, dy, dx)])


@torch.no_grad()
def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """Accuracy and the mean cross-entropy (without label smoothing, so arms compare)."""
    model.eval()
    logits = model(images)
    return ((logits.argmax(1) == labels).float().mean().item(),
            F.cross_entropy(logits, labels).item())


def write(record: dict, path: str | None) -> None:
    if path is None:
        print(json.dumps(record), flush=True)
        return
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")


def main() -> None:
    args = arguments()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = splits(args.data_seed)
    model = model_of(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    checkpoint = os.path.join(args.resume_dir, "checkpoint.pt") if args.resume_dir else None
    start = 0
    if checkpoint and os.path.exists(checkpoint):
        state = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])  # the same shuffles and shifts as an unbroken run
        start = state["epoch"]

    images, labels = data["train"]
    for epoch in range(start + 1, args.epochs + 1):
        model.train()
        losses = []
        for batch in torch.randperm(len(labels)).split(args.batch_size):
            x = shifted(images[batch]) if args.augment else images[batch]
            loss = F.cross_entropy(model(x), labels[batch], label_smoothing=args.label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        val_acc, val_loss = evaluate(model, *data["val"])
        if checkpoint:  # written whole, then renamed: a kill never leaves half a checkpoint
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "rng": torch.get_rng_state(), "epoch": epoch}, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
        write({"epoch": epoch, "train_loss": float(np.mean(losses)), "val_acc": val_acc,
               "val_loss": val_loss}, args.metrics_file)

    test_acc, test_loss = evaluate(model, *data["test"])
    write({"test_acc": test_acc, "test_loss": test_loss}, args.metrics_file)


if __name__ == "__main__":
    main()
