"""The built-in model's own switches: their defaults and validation, in one place.

:class:`MultimodalSwitches` is what a researcher ablates in the built-in model; the runner keeps
it as the ``model`` section of a trial's configuration (``ablations/config/trial.py``), as it
keeps a plugin's own config. :class:`ablations.model.model.ModelConfig` extends it with the data's
shapes and the systems flags the model applies itself. No torch here: the command line reads this
module before any trial starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FULL_WIDTHS = (64, 128, 256)
REDUCED_WIDTHS = (32, 64, 128)
DEFAULT_FRAMES = 4  # frames the model sees, the most recent ones (the data section's default)
HEADS = ("gaussian", "point")


def parse_widths(value: Any, *, name: str = "cnn_widths") -> str:
    """'64,128,256', '64/128/256' or a sequence of three ints -> canonical '64,128,256'.

    Raises:
        ValueError: not three positive integers (the message names ``name`` and the form).
    """
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        parts = str(value).replace("/", ",").replace(" ", "").split(",")
    try:
        widths = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not three integers like 64,128,256") from None
    if len(widths) != 3 or min(widths) < 1:
        raise ValueError(f"{name}: {value!r} is not three positive integers like 64,128,256")
    return ",".join(str(w) for w in widths)


@dataclass(frozen=True, kw_only=True)
class MultimodalSwitches:
    """The built-in model's switches; each names the ablation that turns it off or down.

    ``temporal_frames``, ``use_images``, ``use_scalars`` and ``drop_scalars`` are not here: they
    choose what the model sees, for any model, and live in the data section.
    """

    cnn_widths: str = "64,128,256"  # "32,64,128": ablation `reduced_width`
    spatial_attention: bool = True  # False: mean-pool the CNN map; `no_spatial_attention`
    temporal_attention: bool = True  # False: no attention over frames; `no_temporal_attention`
    # x/y coordinate planes appended to each frame, so that pooled features know where things
    # are; False: the CNN sees pixels only (position then comes from spatial attention's
    # positional embedding, or from the zero padding at the borders)
    coord_channels: bool = True
    head: str = "gaussian"  # "point": mean only, trained with MSE; `point_estimate`
    embed_dim: int = 128  # width of the frame, scalar and fusion embeddings
    num_heads: int = 4  # attention heads, spatial and temporal
    dropout: float = 0.1  # dropout in attention and fusion

    def __post_init__(self) -> None:
        object.__setattr__(self, "cnn_widths", parse_widths(self.cnn_widths))  # canonical form
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad switch and the fix."""
        for name in ("embed_dim", "num_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.embed_dim % self.num_heads:
            raise ValueError(
                f"embed_dim ({self.embed_dim}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.head not in HEADS:
            raise ValueError(f"head: {self.head!r} is not one of {', '.join(HEADS)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def widths(self) -> tuple[int, int, int]:
        a, b, c = (int(w) for w in self.cnn_widths.split(","))
        return a, b, c

# The embedded synthetic set's scalar columns, scalar_0 .. scalar_2 (model/synthetic.py makes
# them); here so that what names them (`list`, a space generated from them) loads no data code
SYNTHETIC_SCALARS = 3
