"""Reading a table's Parquet files with pyarrow exactly as Spark SQL would: which plans have
such a reading (``scan``), the predicate as an Arrow expression (``filter``), the reader
(``read``) with Spark's calendar rule (``rebase``), the wire's Arrow types (``wire``) and the
direct plans a client reads files by (``direct``). Shared by the BE's arrow engine and the
client's direct reads; no Spark here."""
