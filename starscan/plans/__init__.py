"""Plans as the FE hands them out and the BE checks them: the signed, encoded plan
(``codec``), its signing secrets (``secrets``) and the tablet lists of large plans kept by
the server (``tablet_lists``)."""
