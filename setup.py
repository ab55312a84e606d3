"""Build hook for the optional native router; all metadata lives in pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and
stompmq.broker.hashring routes in pure Python (same answers, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "stompmq.broker._rendezvous",
            ["stompmq/broker/_rendezvous.c"],
            optional=True,
        )
    ]
)
