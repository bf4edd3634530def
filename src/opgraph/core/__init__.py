"""Core types: dtypes, shapes, tensor types and errors. Imports nothing from the rest of opgraph."""
