"""Scan-context reaper (installed as ``starscan.gc``; the folder is never imported as ``gc``)."""
