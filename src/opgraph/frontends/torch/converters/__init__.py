"""ATen -> opgraph converters, one module per family; importing this package registers them all."""

from . import core as core
