"""mvlog: Oracle-style materialized view logs on PostgreSQL, fast-refreshed Delta Lake views."""

from mvlog.errors import ConfigError, MvlogError, RefreshError, SourceError, WarehouseError

__version__ = "0.1.0"
__all__ = ["ConfigError", "MvlogError", "RefreshError", "SourceError", "WarehouseError", "__version__"]
