"""Who may read what, and the record of it: users and grants (``users``), bearer tokens,
TLS contexts, rate limits and the audit log."""
