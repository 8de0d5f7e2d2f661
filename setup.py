"""Build of hookviz's one compiled part, the watch's one-pass gradient statistics (hookviz/stats/_fused.c).

It is optional: where no C compiler is found the install goes on without it, and hookviz reduces
gradients with PyTorch's own kernels instead (hookviz.watching.reduce). Everything else is in
pyproject.toml.
"""

import sys

from setuptools import Extension, setup

# -O3 lets GCC and Clang vectorise the lane loops; MSVC takes its own flags.
flags = [] if sys.platform == "win32" else ["-O3"]
setup(
    ext_modules=[
        Extension("hookviz.stats._fused", ["hookviz/stats/_fused.c"], extra_compile_args=flags, optional=True)
    ]
)
