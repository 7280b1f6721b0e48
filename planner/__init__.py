"""FE side: the `_query_plan` and `_schema` HTTP endpoints."""
