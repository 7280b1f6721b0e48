"""The application: the wiring of FE, BE and reaper into one server (``server``), the
command line (``cli``), operations (``operations``), the demo tables, ``starscan load`` and
the log format. The only part of the kernel that imports the sides."""
