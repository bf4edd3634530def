"""The ``opgraph`` command: ``opgraph info``, ``opgraph demo`` (run ``opgraph --help``).

One thin module per subcommand; each exposes ``register(subparsers)`` and ``run(args) -> int``.
"""
