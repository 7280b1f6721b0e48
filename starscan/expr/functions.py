"""The function vocabulary both sides share: which StarRocks SQL functions a predicate may
call, and the Spark function each one is.

The FE (planner/sql.py) maps what sqlglot parsed to these names and puts them in the plan;
the BE (starscan/spark/columns.py, starscan/arrow/filter.py) calls only names in
``SPARK_FUNCTIONS``, whatever a plan says. Every function here is scalar and reads nothing
but its arguments: no files, no JVM reflection.
"""

from __future__ import annotations

from sqlglot import exp

# sqlglot class -> Spark function name.
BY_SQLGLOT_CLASS: dict[type, str] = {
    exp.Lower: "lower", exp.Upper: "upper", exp.Length: "length", exp.Abs: "abs",
    exp.Coalesce: "coalesce", exp.Year: "year", exp.Month: "month", exp.Day: "day",
    exp.Substring: "substring", exp.Concat: "concat", exp.Round: "round",
    exp.Floor: "floor", exp.Ceil: "ceil", exp.Sqrt: "sqrt", exp.Ln: "ln", exp.Exp: "exp",
    exp.Pow: "pow", exp.Greatest: "greatest", exp.Least: "least", exp.If: "if",
    exp.TsOrDsToDate: "to_date", exp.Quarter: "quarter", exp.DayOfWeek: "dayofweek",
    exp.DayOfMonth: "dayofmonth", exp.DayOfYear: "dayofyear", exp.WeekOfYear: "weekofyear",
    exp.Hour: "hour", exp.Minute: "minute", exp.Second: "second",
    exp.Reverse: "reverse", exp.Nullif: "nullif", exp.StrPosition: "instr",
    exp.Left: "left", exp.Right: "right", exp.Sign: "sign",
    exp.ArrayContains: "array_contains", exp.ArraySize: "size",
    exp.Repeat: "repeat", exp.Ascii: "ascii", exp.StartsWith: "startswith", exp.EndsWith: "endswith",
    exp.Contains: "contains", exp.Nvl2: "nvl2", exp.LastDay: "last_day", exp.Hex: "hex",
    exp.Unhex: "unhex", exp.MD5: "md5", exp.SHA: "sha1", exp.SHA2: "sha2", exp.BitLength: "bit_length",
    exp.Negative: "negative", exp.MapKeys: "map_keys", exp.ArrayMax: "array_max",
    exp.ArrayMin: "array_min", exp.RegexpReplace: "regexp_replace", exp.DateDiff: "datediff",
    exp.SplitPart: "split_part", exp.UnixToTime: "from_unixtime",
}
# Functions sqlglot leaves as plain calls; same name and meaning in StarRocks and Spark.
PLAIN_CALLS = {
    "ltrim", "rtrim", "char_length", "character_length", "isnull", "isnotnull", "nvl", "ifnull",
    "crc32", "octet_length", "mod", "pmod", "positive", "cardinality", "element_at", "map_values",
    "locate", "weekday", "unix_timestamp", "year", "month", "day", "strleft", "strright", "to_date",
    "size",
}
# StarRocks spellings of Spark functions.
STARROCKS_SPELLINGS = {"ifnull": "coalesce", "nvl": "coalesce", "strleft": "left", "strright": "right"}
#: Every Spark function name a plan's ``func`` node may carry (the BE refuses others).
SPARK_FUNCTIONS = frozenset(
    set(BY_SQLGLOT_CLASS.values()) | (PLAIN_CALLS - set(STARROCKS_SPELLINGS))
    | {"rlike", "coalesce", "trim", "ltrim", "rtrim", "ln", "log", "log2", "log10", "initcap", "lpad", "rpad"}
)


__all__ = ["BY_SQLGLOT_CLASS", "PLAIN_CALLS", "SPARK_FUNCTIONS", "STARROCKS_SPELLINGS"]
