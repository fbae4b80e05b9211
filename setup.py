"""The optional C extension ``distgnn._native`` (everything else is in pyproject.toml).

``optional=True``: without a compiler the install still succeeds and the NumPy reference
implementations are used (``distgnn.native``). In a checkout: ``python setup.py
build_ext --inplace`` (``make native``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "distgnn._native",
            ["runtime/distgnn/_native.c"],
            extra_compile_args=["-O3", "-std=gnu11"],
            optional=True,
        )
    ]
)
