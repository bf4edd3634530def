"""Frontends: models from other frameworks as opgraph graphs (``frontends.torch``: PyTorch)."""
