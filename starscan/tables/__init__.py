"""Tables and their versions: the warehouse of folder tables and the catalogs beside it
(``catalog``; Delta, Iceberg and Hive metastore tables in their own modules), tablets as
splits of files (``tablets``), version histories, changes between versions and consumers'
positions for incremental reads."""
