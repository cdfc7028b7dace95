"""Import a torch.nn.Module as a parallel_ops Model, and write trained weights back.

    imp = import_module(net, (images,))           # torch.fx, or torch.export if fx fails
    imp.add_cross_entropy()                       # labels input + loss on the output
    trainer = imp.model.compile(machine, strategy, SGD(lr=0.1))
    trainer.step(imp.feeds(images, labels=labels))
    imp.write_back(trainer)                       # net.load_state_dict(trained weights)

See docs/importer.md for what maps to what and how to add a converter.
"""
from .imported import Imported
from .registry import register_aten, register_function, register_method, register_module
from ..errors import UnsupportedModelError
from .values import Param, Stacked, Unsupported
from .api import import_module
from . import functions, modules, vision  # noqa: F401  (register the converters)

__all__ = ["import_module", "Imported", "UnsupportedModelError", "Unsupported", "Param",
           "Stacked", "register_module", "register_function", "register_method",
           "register_aten"]
