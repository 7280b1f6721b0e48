"""Where a table's files are and how they are named: the stores (a local folder or an object
store through ``pyarrow.fs``, ``stores``), the rules for file names that every listing
follows (Spark's hidden files) and starscan's own small files (``files``), and Hadoop's
path and partition-folder spelling (``hadoop_paths``). No Spark here."""
