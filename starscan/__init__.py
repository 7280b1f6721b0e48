"""starscan: the StarRocks external scan protocol, served from Apache Spark."""

__version__ = "0.1.0"
