"""The graph IR: ops, tensors, the op object, attributes, text form, verifier and serialisation."""
