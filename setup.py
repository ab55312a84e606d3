"""Build hook for the optional native code; all metadata lives in pyproject.toml.

Both extensions are optional: without a C compiler the install still succeeds,
stompmq.broker.hashring routes in pure Python and stompmq.protocol parses and
encodes frames in pure Python (same answers, slower).
"""

from setuptools import Extension, setup

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
    ]
)
