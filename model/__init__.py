"""The multimodal spatiotemporal regression model and its data."""

from model.data import (
    DataError,
    RegressionData,
    SyntheticSpec,
    check_directory,
    load_directory,
    load_synthetic,
    make_synthetic,
)
from model.config import FULL_WIDTHS, REDUCED_WIDTHS, MultimodalSwitches
from model.model import (
    ModelConfig,
    MultimodalRegressionModel,
    build_model,
    count_parameters,
)

__all__ = [
    "FULL_WIDTHS",
    "REDUCED_WIDTHS",
    "DataError",
    "ModelConfig",
    "MultimodalSwitches",
    "MultimodalRegressionModel",
    "RegressionData",
    "SyntheticSpec",
    "build_model",
    "check_directory",
    "count_parameters",
    "load_directory",
    "load_synthetic",
    "make_synthetic",
]
