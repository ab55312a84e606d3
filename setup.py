"""Build hook for the optional native code; all metadata lives in pyproject.toml.

Every piece is optional: without a C compiler the install still succeeds,
stompmq.broker.hashring routes in pure Python and stompmq.protocol parses and
encodes frames in pure Python (same answers, slower).

``STOMPMQ_MYPYC=1`` in the environment also compiles the engine, every module of
``stompmq/broker/`` (a glob: a new module is compiled without a list to edit),
with mypyc, which ships with mypy: a third fewer instructions per message
(docs/decisions/compiled-engine.md).  It is asked for, not the default, because
the pure-Python engine is the reference and an in-place build (an editable
install, ``build_ext --inplace``) puts the compiled modules beside the sources,
where they shadow them.  When mypyc or a C compiler is missing the build says so
and stays pure Python.  ``stompmq.broker.build.describe()`` (the start-up line)
says which engine runs.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import sysconfig

from setuptools import Extension, setup

MYPYC_VAR = "STOMPMQ_MYPYC"


def _c_compiler() -> bool:
    """Whether the C compiler Python was built with (or $CC) is on PATH."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(command.split()[0]) is not None


def _compiled_engine() -> list[Extension]:
    """The engine's modules compiled by mypyc, or none (pure Python) when not asked or not possible."""
    if os.environ.get(MYPYC_VAR, "") in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print(f"setup.py: {MYPYC_VAR} is set but mypyc (mypy) is not installed: the engine stays pure Python",
              file=sys.stderr)
        return []
    if not _c_compiler():
        print(f"setup.py: {MYPYC_VAR} is set but there is no C compiler: the engine stays pure Python",
              file=sys.stderr)
        return []
    modules = sorted([*glob.glob("stompmq/broker/*.py"), *glob.glob("stompmq/broker/kinds/*.py"),
                      "stompmq/storage/messages.py"])
    # The project's mypy configuration (pyproject.toml) applies; its sections for other packages
    # are unused here.  multi_file: a C file per module, so a rebuild recompiles the changed ones;
    # group_name: the shared library of them all is stompmq_engine__mypyc, not a hash.
    return list(mypycify(["--no-warn-unused-configs", *modules], opt_level="3", multi_file=True,
                         group_name="stompmq_engine"))


setup(
    ext_modules=[
        Extension(
            "stompmq.broker._rendezvous",
            ["stompmq/broker/_rendezvous.c"],
            optional=True,
        ),
        Extension(
            "stompmq.protocol._frames",
            ["stompmq/protocol/_frames.c"],
            optional=True,
        ),
        *_compiled_engine(),
    ]
)
