"""One module per ``flyviz`` subcommand, each with ``configure(parser)`` and ``run(args)``."""
