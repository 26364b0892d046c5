"""What the workers of one project share — its configuration, its PostgreSQL source with mvlog's
catalog and logs on it, the compiler of its views, and its warehouse (started on first use) — and
the base of a worker that reads them: the registrar, the refresher, maintenance, verify, status.

A refresh lane has parts of its own (connections and Spark sessions are per thread):
:meth:`ProjectParts.on` makes them over a source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mvlog.config import Config
from mvlog.pipeline.compile import Compiler
from mvlog.postgres.catalog import Catalog
from mvlog.postgres.logs import Logs
from mvlog.postgres.source import Source

if TYPE_CHECKING:
    from mvlog.spark.warehouse import Warehouse


@dataclass(frozen=True)
class ProjectParts:
    """One project's configuration, connections and compiler, as its workers share them."""

    config: Config
    source: Source
    catalog: Catalog
    logs: Logs
    compiler: Compiler
    warehouse: Callable[[], Warehouse]  # started on first use: planning alone needs no Spark

    @classmethod
    def on(cls, config: Config, source: Source, warehouse: Callable[[], Warehouse]) -> ProjectParts:
        """The parts over ``source``: its catalog, its logs and a compiler reading through them."""
        catalog, logs = Catalog(source), Logs(source)
        return cls(config, source, catalog, logs, Compiler(config, source, catalog, logs), warehouse)


class ProjectWorker:
    """A worker over a project's parts, which it reads through ``self.parts``."""

    def __init__(self, parts: ProjectParts):
        self.parts = parts

    @property
    def config(self) -> Config:
        return self.parts.config

    @property
    def source(self) -> Source:
        return self.parts.source

    @property
    def catalog(self) -> Catalog:
        return self.parts.catalog

    @property
    def logs(self) -> Logs:
        return self.parts.logs

    @property
    def compiler(self) -> Compiler:
        return self.parts.compiler

    @property
    def warehouse(self) -> Warehouse:
        return self.parts.warehouse()
