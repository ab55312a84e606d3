"""trio network glue: listeners and one Connection per client."""

from .app import run_until_signal, serve
from .settings import ServerSettings

__all__ = ["ServerSettings", "run_until_signal", "serve"]
