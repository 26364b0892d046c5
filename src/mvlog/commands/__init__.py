"""The commands: the CLI, what it prints, the scheduler, the demo and the notebook."""
