"""Machine models (the interface named in issue 6); the code lives in strategy/machines/."""
from .machines import *  # noqa: F401,F403
from .machines import __all__  # noqa: F401
