"""What the tests (and the benchmarks) share, one copy each: bounded waits and free ports
(``waits``), servers of their own and `starscan serve` processes (``servers``), BE readers
and what they read (``readers``), the StarRocks text forms of Spark's values (``values``),
socket pairs (``sockets``), moto's S3 server (``s3``) and a fault-injecting TCP proxy
(``proxies``). Test modules import from here, never from each other; bench/ imports from
here too, never the reverse."""
