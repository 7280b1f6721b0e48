"""BE side: the Thrift `TStarrocksExternalService` running scans on Spark."""
