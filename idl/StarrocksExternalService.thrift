// Wire contract of StarRocks' external scan service, as served on be_port.
// Field ids, types, requiredness and enum values are those of the StarRocks
// thrift SDK (starrocks-thrift-sdk 1.0.1); see docs/protocol.md section 3.
// Enums are in one file so both thriftpy2 and Apache Thrift's compiler load it alone.

namespace java com.starrocks.thrift
namespace py starscan_wire

enum TStatusCode {
  OK = 0,
  CANCELLED = 1,
  ANALYSIS_ERROR = 2,
  NOT_IMPLEMENTED_ERROR = 3,
  RUNTIME_ERROR = 4,
  MEM_LIMIT_EXCEEDED = 5,
  INTERNAL_ERROR = 6,
  THRIFT_RPC_ERROR = 7,
  TIMEOUT = 8,
  KUDU_NOT_ENABLED = 9,
  KUDU_NOT_SUPPORTED_ON_OS = 10,
  MEM_ALLOC_FAILED = 11,
  BUFFER_ALLOCATION_FAILED = 12,
  MINIMUM_RESERVATION_UNAVAILABLE = 13,
  PUBLISH_TIMEOUT = 14,
  LABEL_ALREADY_EXISTS = 15,
  TOO_MANY_TASKS = 16,
  ES_INTERNAL_ERROR = 17,
  ES_INDEX_NOT_FOUND = 18,
  ES_SHARD_NOT_FOUND = 19,
  ES_INVALID_CONTEXTID = 20,
  ES_INVALID_OFFSET = 21,
  ES_REQUEST_ERROR = 22,
  END_OF_FILE = 30,
  NOT_FOUND = 31,
  CORRUPTION = 32,
  INVALID_ARGUMENT = 33,
  IO_ERROR = 34,
  ALREADY_EXIST = 35,
  NETWORK_ERROR = 36,
  ILLEGAL_STATE = 37,
  NOT_AUTHORIZED = 38,
  ABORTED = 39,
  REMOTE_ERROR = 40,
  SERVICE_UNAVAILABLE = 41,
  UNINITIALIZED = 42,
  CONFIGURATION_ERROR = 43,
  INCOMPLETE = 44,
  OLAP_ERR_VERSION_ALREADY_MERGED = 45,
  DATA_QUALITY_ERROR = 46,
  DUPLICATE_RPC_INVOCATION = 47,
  UNKNOWN = 50
}

enum TPrimitiveType {
  INVALID_TYPE = 0,
  NULL_TYPE = 1,
  BOOLEAN = 2,
  TINYINT = 3,
  SMALLINT = 4,
  INT = 5,
  BIGINT = 6,
  FLOAT = 7,
  DOUBLE = 8,
  DATE = 9,
  DATETIME = 10,
  BINARY = 11,
  DECIMAL = 12,
  CHAR = 13,
  LARGEINT = 14,
  VARCHAR = 15,
  HLL = 16,
  DECIMALV2 = 17,
  TIME = 18,
  OBJECT = 19,
  PERCENTILE = 20,
  DECIMAL32 = 21,
  DECIMAL64 = 22,
  DECIMAL128 = 23,
  JSON = 24,
  FUNCTION = 25,
  VARBINARY = 26
}

struct TStatus {
  1: required TStatusCode status_code
  2: optional list<string> error_msgs
}

struct TScanOpenParams {
  1: required string cluster
  2: required string database
  3: required string table
  4: required list<i64> tablet_ids
  5: required string opaqued_query_plan
  6: optional i32 batch_size
  7: optional map<string, string> properties
  8: optional i64 limit
  9: optional string user
  10: optional string passwd
  11: optional i16 keep_alive_min
  12: optional i32 query_timeout
  13: optional i64 mem_limit
}

struct TScanColumnDesc {
  1: optional string name
  2: optional TPrimitiveType type
}

struct TScanOpenResult {
  1: required TStatus status
  2: optional string context_id
  3: optional list<TScanColumnDesc> selected_columns
}

struct TScanNextBatchParams {
  1: optional string context_id
  2: optional i64 offset
}

struct TScanBatchResult {
  1: required TStatus status
  2: optional bool eos
  3: optional binary rows
}

struct TScanCloseParams {
  1: optional string context_id
}

struct TScanCloseResult {
  1: required TStatus status
}

service TStarrocksExternalService {
  TScanOpenResult open_scanner(1: TScanOpenParams params)
  TScanBatchResult get_next(1: TScanNextBatchParams params)
  TScanCloseResult close_scanner(1: TScanCloseParams params)
}
