"""The built-in model's own switches: their defaults and validation, in one place.

:class:`MultimodalSwitches` is what a researcher ablates in the built-in model; the runner keeps
it as the ``model`` section of a trial's configuration (``ablations/config/trial.py``), as it
keeps a plugin's own config. :class:`ModelConfig` extends it with the data's shapes and the
systems flags the model applies itself. No torch here: the command line reads this module before
any trial starts, and the driver's cost estimate keys its kept counts by a ``ModelConfig``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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


@dataclass(frozen=True, kw_only=True)
class ModelConfig(MultimodalSwitches):
    """The switches (:class:`MultimodalSwitches`: defaults and their validation are there), the
    shapes of the data and the systems flags the model applies itself.

    The shape fields are filled from the data, never from constants here.
    """

    in_channels: int  # C of the frames (from the data)
    image_height: int  # H (from the data)
    image_width: int  # W (from the data)
    num_scalars: int  # S, length of the scalar feature vector (from the data)
    temporal_frames: int = DEFAULT_FRAMES  # frames used, the most recent ones; 1: `single_frame`
    use_images: bool = True  # False: no CNN at all, scalars only; ablation `no_images`
    use_scalars: bool = True  # False: no scalar branch; ablation `no_scalars`
    gradient_checkpointing: bool = False  # recompute the CNN and attention in backward
    channels_last: bool = False  # NHWC memory format for the CNN's input (systems switch)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("in_channels", "image_height", "image_width", "temporal_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_scalars < 0:
            raise ValueError(f"num_scalars must be >= 0, got {self.num_scalars}")
        if not (self.use_images or self.use_scalars):
            raise ValueError("use_images and use_scalars are both False: the model has no input")
        if self.use_scalars and self.num_scalars == 0:
            raise ValueError("use_scalars is True but the data has no scalar features")

    @property
    def feature_map_size(self) -> tuple[int, int]:
        """(h, w) of the CNN's last map: two stride-2 convolutions."""
        return _after_stride2(_after_stride2(self.image_height)), _after_stride2(
            _after_stride2(self.image_width)
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _after_stride2(size: int) -> int:
    return (size - 1) // 2 + 1  # 3x3 conv, padding 1, stride 2
