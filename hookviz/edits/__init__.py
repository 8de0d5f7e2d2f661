"""Edits at hook sites: the safe expression language and the plain-PyTorch code an edit stands for."""
