"""The push path: Spark tasks push a scan's rows into the BE that serves its reader.

``wire`` is the protocol both ends speak, ``task`` the end in Spark's Python workers,
``listener`` the BE's end that admits connections, ``sink`` what one scan's tasks push
into, and ``scheduler`` the BE's one scheduler of Spark task slots among its scans."""
