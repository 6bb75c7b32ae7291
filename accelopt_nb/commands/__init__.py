"""Subcommands of the `accelopt` CLI, one module each (discovered by accelopt_nb.cli)."""
