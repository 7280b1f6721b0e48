"""Spark glue: the SparkSession starscan runs on and its reading sessions (``session``),
expressions as Spark Columns (``columns``), Spark's types as StarRocks types (``types``),
table schemas as Spark reads them (``schemas``) and the PySpark data source that reads
through a starscan server (``datasource``)."""
