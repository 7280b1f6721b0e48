"""The FE's statement service (``service``): what every SQL door's statements answer, and the
rules they keep (grants, rate and planning limits, row limits, the audit trail), in one
place. ``answers`` are what a door asks and gets back; ``show`` and ``info_schema`` answer
metadata from the user's ``catalog_view``; ``spark_queries`` and ``table_frames`` are the
queries Spark SQL runs on the FE; ``scan_reads`` and ``relay`` read a plan's rows from the
BEs where the FE hands them on itself."""

from starscan.planner.statements.answers import Answer, QueryAnswer, ScanAnswer, Statement, TableAnswer
from starscan.planner.statements.catalog_view import CatalogView
from starscan.planner.statements.scan_reads import ScanReads
from starscan.planner.statements.service import StatementService

__all__ = ["Answer", "CatalogView", "QueryAnswer", "ScanAnswer", "ScanReads", "Statement", "StatementService",
           "TableAnswer"]
