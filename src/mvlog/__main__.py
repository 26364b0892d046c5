from mvlog.cli import entry

entry()
