"""starscan's settings: the typed configuration (``config``), the settings that change while
the server runs (``runtime``) and the generated reference of all of them (``reference``)."""
