"""The external scan protocol's Thrift server, shared by the BE (its scan service) and the
FE (its Thrift relay, planner/thrift_relay): a thread per connection, bounded request reads,
replies begun early and kept alive, rows sent from their buffers in one scatter-gather send."""
