"""parallel_ops: SOAP-partitioned operators, the model API, lowering and training.

Importing the package attaches every operator's builder (model.conv2d, model.linear, ...)
to Model.
"""
from .activation import fuse_activations
from .config import ParallelConfig, data_parallel, validate
from .errors import (CheckpointError, ConfigError, OperatorError, ShapeError,
                     UnsupportedModelError)
from .lowering import Lowered, lower
from .model import Model, builder
from .op import ATTRIBUTE, PARAMETER, REDUCTION, SAMPLE, Dim, Op, PartSpec, Stage
from .optim import SGD, Adam
from .tensor import Tensor, Weight
from .trainer import Trainer
from . import (linear, loss, elementwise, dropout, shape, softmax, layernorm,  # noqa: F401
               conv2d, pool2d, batchnorm,
               embedding, matmul, attention, lstm, seq_attention)
from . import broadcast, cast, rmsnorm, unary  # noqa: F401  (imported models' operators)

__all__ = ["ParallelConfig", "data_parallel", "validate", "CheckpointError", "ConfigError",
           "OperatorError", "ShapeError", "UnsupportedModelError", "Lowered", "lower", "Model",
           "builder", "ATTRIBUTE", "PARAMETER", "REDUCTION", "SAMPLE", "Dim", "Op", "PartSpec",
           "Stage", "SGD", "Adam", "Tensor", "Weight", "Trainer", "fuse_activations"]
