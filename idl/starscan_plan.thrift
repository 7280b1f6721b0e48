// starscan's own opaque scan plan: what the FE hands out as `opaqued_query_plan`.
// Clients never look inside; BEs trust it only when its HMAC signature checks out.

namespace py starscan_plan

// One node of a predicate or output expression, flattened in pre-order
// (like StarRocks' TExprNode list): a node is followed by its `num_children` subtrees.
struct TExprNode {
  1: required string kind        // column | literal | op | func | cast | in | between | is_null | like | case
  2: required i32 num_children
  3: optional string name        // column name, operator symbol or function name
  4: optional string literal_type  // null | boolean | int | bigint | decimal | double | string | date | timestamp
  5: optional string literal_value // textual value of the literal, canonical form
  6: optional bool negated       // NOT IN, NOT LIKE, IS NOT NULL, NOT BETWEEN
  7: optional string type_name   // cast target, Spark type string
}

struct TExpr {
  1: required list<TExprNode> nodes
}

struct TPlanColumn {
  1: required string name          // output name (column name or alias)
  2: required string source        // table column it reads; empty when not a slot ref
  3: required string spark_type    // Spark type as JSON (DataType.json())
  4: required i32 primitive_type   // TPrimitiveType value reported to the client
  5: required bool nullable
  6: required bool is_slot_ref     // false for computed items such as `k1 + 1`
}

struct TPlanFile {
  1: required string path          // relative to the table directory, '/'-separated
  2: required i64 size
  3: required i64 mtime_ns
  4: optional string deletes       // the file's row-level deletes (JSON: a Delta deletion vector's place), if any
  // The file's partition values as the table format records them (JSON {column: text or
  // null}), for a table whose folders do not spell them (Delta column mapping); see
  // TScanPlan.partition_columns.
  5: optional string partition
}

// Whole files, or (first_row_group set) a run of row_groups row groups of its one file that
// holds rows [first_row, first_row + rows) of it.
struct TPlanTablet {
  1: required i64 tablet_id
  2: required list<TPlanFile> files
  3: optional i32 first_row_group
  4: optional i32 row_groups
  5: optional i64 first_row
  6: optional i64 rows
}

// The planned tablets, serialized once per table version and tablet set and carried as
// bytes in TScanPlan: large tables make this the bulk of every plan.
struct TPlanTablets {
  1: required list<TPlanTablet> tablets
}

struct TScanPlan {
  1: required string query_id
  2: required string database
  3: required string table
  4: required string table_location  // absolute path of the table directory
  5: required i32 version
  6: required list<TPlanColumn> columns
  7: optional TExpr predicate
  8: required binary tablets         // TBinaryProtocol bytes of TPlanTablets
  9: required string user
  10: required i64 issued_at_ms
  11: required i64 expires_at_ms
  12: required string table_schema    // the table's full Spark schema as JSON
  13: required i32 schema_hash
  14: optional string sql             // the client's SQL (truncated), for audit lines only: never executed
  // A large table's plan leaves `tablets` empty and names the table's whole tablet list by
  // its digest (starscan.plans.tablet_lists) with the ids of the tablets planned.
  15: optional binary tablets_digest
  16: optional list<i64> tablet_ids
  // Unset: partition columns are read from `col=value` folders. Empty: the partition values
  // are inside the data files (Iceberg), its folders are not partitions. Not empty: these
  // partition columns' values are carried by each file (TPlanFile.partition).
  17: optional list<string> partition_columns
  // The data files' format when it is not Parquet ("orc": Hive metastore tables).
  18: optional string file_format
  // The files' own names of the table's columns where a table format names them apart from
  // its schema (Delta column mapping): JSON {column: name in the files}. Absent: the same.
  19: optional string file_columns
}

// What actually goes on the wire (base64 of its binary serialization).
struct TSignedPlan {
  1: required i16 format_version
  2: required binary plan            // TBinaryProtocol bytes of TScanPlan
  3: required binary signature       // HMAC-SHA256(secret, plan)
  4: required string key_id          // which secret signed it (for rotation)
}
