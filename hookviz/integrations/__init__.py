"""Callbacks that watch a framework's training: ``hookviz.integrations.lightning.HookvizCallback``
(PyTorch Lightning) and ``hookviz.integrations.transformers.HookvizCallback`` (Hugging Face
``Trainer``). Each callback module imports its framework; this package imports nothing, and
:mod:`~hookviz.integrations.optimizers` (imported by ``hookviz`` itself) no framework, so
``import hookviz`` never pulls in a framework (install one with ``pip install
"hookviz[lightning]"`` or ``"hookviz[transformers]"``).
"""
