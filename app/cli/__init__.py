"""The command line: the argument parser and what each subcommand does."""
