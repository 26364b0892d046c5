from mvlog.commands.cli import entry

entry()
