//! Values in and out by the types the server inferred, so call sites keep binding what they
//! bind on SQLite: strings for timestamps and JSON, integers for flags.
//!
//! Parameters are converted for the parameter type the prepared statement reports; columns are
//! read by the column type it reports. Timestamps travel as `timestamptz` and come back as the
//! text SQLite stores (`%Y-%m-%dT%H:%M:%S%.3fZ`, UTC, milliseconds); JSON travels as its bytes,
//! never re-serialized, so a `json` column gives back exactly the text it was given.

use std::borrow::Cow;
use std::error::Error as StdError;

use bytes::{BufMut, BytesMut};
use chrono::{DateTime, Utc};
use postgres_types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use super::error::{PgError, PgErrorKind};
use crate::time::{format_timestamp, parse_timestamp};
use crate::value::Value;

/// The version byte that starts `jsonb`'s binary form.
const JSONB_VERSION: u8 = 1;

/// A parameter already converted for its server type; encoding it cannot fail.
///
/// Its `Debug` names the variant only: the driver logs parameters with `Debug` at the `log`
/// crate's debug level, and parameter values are payloads.
#[cfg_attr(test, derive(PartialEq))]
pub(super) enum Bound<'a> {
    Null,
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Oid(u32),
    Float4(f32),
    Float8(f64),
    /// Text, and `json` (whose binary form is its text).
    Text(&'a str),
    Jsonb(&'a str),
    Bytea(&'a [u8]),
    Timestamptz(DateTime<Utc>),
    Uuid(uuid::Uuid),
}

impl std::fmt::Debug for Bound<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Self::Null => "Null",
            Self::Bool(_) => "Bool",
            Self::Int2(_) => "Int2",
            Self::Int4(_) => "Int4",
            Self::Int8(_) => "Int8",
            Self::Oid(_) => "Oid",
            Self::Float4(_) => "Float4",
            Self::Float8(_) => "Float8",
            Self::Text(_) => "Text",
            Self::Jsonb(_) => "Jsonb",
            Self::Bytea(_) => "Bytea",
            Self::Timestamptz(_) => "Timestamptz",
            Self::Uuid(_) => "Uuid",
        };
        f.write_str(name)
    }
}

/// Converts `value`, parameter number `number` (1-based, `$number`), for the server's `ty`.
///
/// # Errors
///
/// `Parameter` when the value's kind does not go to `ty` (or the text is not a timestamp or a
/// UUID), `OutOfRange` when an integer does not fit. Messages name the parameter and the types,
/// never the value.
pub(super) fn bind<'v>(
    number: usize,
    value: &'v Value<'_>,
    ty: &Type,
    sql: &str,
) -> Result<Bound<'v>, PgError> {
    let mismatch = |kind: PgErrorKind, why: &str| {
        let message = format!(
            "parameter ${number} ({}) cannot be bound to {ty}{why}",
            value.kind()
        );
        PgError::new(kind, message, Some(sql))
    };
    let out_of_range = || mismatch(PgErrorKind::OutOfRange, ": out of range");
    let bound = match (value, ty) {
        (Value::Null, _) => Bound::Null,
        (Value::Integer(v), &Type::INT8) => Bound::Int8(*v),
        (Value::Integer(v), &Type::INT4) => {
            Bound::Int4(i32::try_from(*v).map_err(|_| out_of_range())?)
        }
        (Value::Integer(v), &Type::INT2) => {
            Bound::Int2(i16::try_from(*v).map_err(|_| out_of_range())?)
        }
        (Value::Integer(v), &Type::OID) => {
            Bound::Oid(u32::try_from(*v).map_err(|_| out_of_range())?)
        }
        (Value::Integer(v), &Type::BOOL) => match v {
            0 => Bound::Bool(false),
            1 => Bound::Bool(true),
            _ => return Err(out_of_range()),
        },
        // An integer in a float context (`x * ?`) is exact up to 2^53.
        (Value::Integer(v), &Type::FLOAT8) => {
            let float = *v as f64;
            if float as i64 != *v || float.abs() >= 2_f64.powi(63) {
                return Err(out_of_range());
            }
            Bound::Float8(float)
        }
        (Value::Real(v), &Type::FLOAT8) => Bound::Float8(*v),
        // A `real` column holds single precision: the value is rounded to it, as the server would.
        (Value::Real(v), &Type::FLOAT4) => Bound::Float4(*v as f32),
        (
            Value::Text(text),
            &Type::TEXT | &Type::VARCHAR | &Type::NAME | &Type::BPCHAR | &Type::JSON,
        ) => Bound::Text(text),
        (Value::Text(text), &Type::JSONB) => Bound::Jsonb(text),
        (Value::Text(text), &Type::TIMESTAMPTZ) => Bound::Timestamptz(
            parse_timestamp(text)
                .ok_or_else(|| mismatch(PgErrorKind::Parameter, ": not an RFC 3339 timestamp"))?,
        ),
        (Value::Text(text), &Type::UUID) => Bound::Uuid(
            uuid::Uuid::parse_str(text)
                .map_err(|_| mismatch(PgErrorKind::Parameter, ": not a UUID"))?,
        ),
        (Value::Blob(bytes), &Type::BYTEA) => Bound::Bytea(bytes),
        (_, &Type::NUMERIC) => {
            return Err(mismatch(
                PgErrorKind::Parameter,
                ": numeric is not supported, CAST the parameter (e.g. `CAST(? AS BIGINT)`)",
            ));
        }
        _ => return Err(mismatch(PgErrorKind::Parameter, "")),
    };
    Ok(bound)
}

impl ToSql for Bound<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Self::Null => return Ok(IsNull::Yes),
            Self::Bool(v) => return v.to_sql(ty, out),
            Self::Int2(v) => return v.to_sql(ty, out),
            Self::Int4(v) => return v.to_sql(ty, out),
            Self::Int8(v) => return v.to_sql(ty, out),
            Self::Oid(v) => return v.to_sql(ty, out),
            Self::Float4(v) => return v.to_sql(ty, out),
            Self::Float8(v) => return v.to_sql(ty, out),
            Self::Timestamptz(v) => return v.to_sql(ty, out),
            Self::Text(text) => out.put_slice(text.as_bytes()),
            Self::Jsonb(text) => {
                out.put_u8(JSONB_VERSION);
                out.put_slice(text.as_bytes());
            }
            Self::Bytea(bytes) => out.put_slice(bytes),
            Self::Uuid(uuid) => out.put_slice(uuid.as_bytes()),
        }
        Ok(IsNull::No)
    }

    /// Every type: `bind` chose the encoding for the type the server reported.
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// How a result column is decoded, chosen once per prepared statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reader {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Float4,
    Float8,
    /// `text`, `varchar`, `name`, `bpchar` and `json`: UTF-8 bytes.
    Text,
    Jsonb,
    Uuid,
    Bytea,
    Timestamptz,
    /// `void` (the result of `pg_advisory_xact_lock` and the like): always NULL.
    Void,
}

impl Reader {
    /// The reader for column `name` of type `ty`.
    ///
    /// # Errors
    ///
    /// `UnsupportedType` for any other type; for `numeric` it says to cast.
    pub(super) fn for_column(
        index: usize,
        name: &str,
        ty: &Type,
        sql: &str,
    ) -> Result<Self, PgError> {
        let reader = match *ty {
            Type::BOOL => Self::Bool,
            Type::INT2 => Self::Int2,
            Type::INT4 => Self::Int4,
            Type::INT8 => Self::Int8,
            Type::OID => Self::Oid,
            Type::FLOAT4 => Self::Float4,
            Type::FLOAT8 => Self::Float8,
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::JSON => Self::Text,
            Type::JSONB => Self::Jsonb,
            Type::UUID => Self::Uuid,
            Type::BYTEA => Self::Bytea,
            Type::TIMESTAMPTZ => Self::Timestamptz,
            Type::VOID => Self::Void,
            _ => {
                let hint = if *ty == Type::NUMERIC {
                    ": CAST it, e.g. `CAST(sum(x) AS BIGINT)` (valid on SQLite too)"
                } else {
                    ""
                };
                let message = format!("column {index} `{name}` has type {ty}{hint}");
                return Err(PgError::new(
                    PgErrorKind::UnsupportedType,
                    message,
                    Some(sql),
                ));
            }
        };
        Ok(reader)
    }

    /// Decodes one value; `raw` is `None` for NULL.
    ///
    /// # Errors
    ///
    /// `Column` when the bytes are not what the type promises (a driver or server bug, or a
    /// timestamp beyond chrono's range). The message never quotes the bytes.
    pub(super) fn read(
        self,
        ty: &Type,
        raw: Option<&[u8]>,
    ) -> Result<Value<'static>, Box<dyn StdError + Sync + Send>> {
        let Some(raw) = raw else {
            return Ok(Value::Null);
        };
        let value = match self {
            Self::Bool => Value::Integer(i64::from(bool::from_sql(ty, raw)?)),
            Self::Int2 => Value::Integer(i64::from(i16::from_sql(ty, raw)?)),
            Self::Int4 => Value::Integer(i64::from(i32::from_sql(ty, raw)?)),
            Self::Int8 => Value::Integer(i64::from_sql(ty, raw)?),
            Self::Oid => Value::Integer(i64::from(u32::from_sql(ty, raw)?)),
            Self::Float4 => Value::Real(f64::from(f32::from_sql(ty, raw)?)),
            Self::Float8 => Value::Real(f64::from_sql(ty, raw)?),
            Self::Text => Value::Text(Cow::Owned(std::str::from_utf8(raw)?.to_owned())),
            Self::Jsonb => match raw.split_first() {
                Some((&JSONB_VERSION, text)) => {
                    Value::Text(Cow::Owned(std::str::from_utf8(text)?.to_owned()))
                }
                _ => return Err("unknown jsonb version".into()),
            },
            Self::Uuid => Value::Text(Cow::Owned(
                uuid::Uuid::from_slice(raw)?.hyphenated().to_string(),
            )),
            Self::Bytea => Value::Blob(Cow::Owned(raw.to_vec())),
            Self::Timestamptz => Value::Text(Cow::Owned(format_timestamp(
                DateTime::<Utc>::from_sql(ty, raw)?,
            ))),
            Self::Void => Value::Null,
        };
        Ok(value)
    }
}

/// A column's undecoded bytes, so that `Reader` decodes by the type the statement reported.
pub(super) struct Raw<'a>(pub(super) Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Self(Some(raw)))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Self(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound<'v>(value: &'v Value<'_>, ty: &Type) -> Result<Bound<'v>, PgErrorKind> {
        bind(1, value, ty, "SELECT $1").map_err(|e| e.kind())
    }

    #[test]
    fn integers_are_range_checked_for_the_server_type() {
        assert_eq!(
            bound(&Value::Integer(32_767), &Type::INT2),
            Ok(Bound::Int2(32_767))
        );
        assert_eq!(
            bound(&Value::Integer(32_768), &Type::INT2),
            Err(PgErrorKind::OutOfRange)
        );
        assert_eq!(
            bound(&Value::Integer(i64::from(i32::MIN) - 1), &Type::INT4),
            Err(PgErrorKind::OutOfRange)
        );
        assert_eq!(
            bound(&Value::Integer(-1), &Type::OID),
            Err(PgErrorKind::OutOfRange)
        );
        assert_eq!(
            bound(&Value::Integer(1), &Type::BOOL),
            Ok(Bound::Bool(true))
        );
        assert_eq!(
            bound(&Value::Integer(2), &Type::BOOL),
            Err(PgErrorKind::OutOfRange)
        );
        assert_eq!(
            bound(&Value::Integer(1 << 53), &Type::FLOAT8),
            Ok(Bound::Float8(9_007_199_254_740_992.0))
        );
        assert_eq!(
            bound(&Value::Integer((1 << 53) + 1), &Type::FLOAT8),
            Err(PgErrorKind::OutOfRange)
        );
        assert_eq!(
            bound(&Value::Integer(i64::MAX), &Type::FLOAT8),
            Err(PgErrorKind::OutOfRange)
        );
    }

    #[test]
    fn a_bound_value_never_shows_in_debug_output() {
        let value = Value::Text("secret-payload".into());
        let bound = bind(1, &value, &Type::TEXT, "SELECT $1").unwrap();
        assert_eq!(format!("{bound:?}"), "Text");
    }

    #[test]
    fn mismatches_name_types_but_never_the_value() {
        let error = bind(
            2,
            &Value::Text("secret-payload".into()),
            &Type::INT8,
            "SELECT $2",
        )
        .unwrap_err();
        assert_eq!(error.kind(), PgErrorKind::Parameter);
        assert_eq!(
            error.message(),
            "parameter $2 (TEXT) cannot be bound to int8"
        );
        let error = bind(1, &Value::Text("secret".into()), &Type::TIMESTAMPTZ, "x").unwrap_err();
        assert!(!error.to_string().contains("secret"), "{error}");
        assert!(
            bind(1, &Value::Integer(1), &Type::NUMERIC, "x")
                .unwrap_err()
                .message()
                .contains("CAST")
        );
    }

    #[test]
    fn numeric_columns_are_refused_with_the_fix() {
        let error = Reader::for_column(0, "total", &Type::NUMERIC, "SELECT sum(x)").unwrap_err();
        assert_eq!(error.kind(), PgErrorKind::UnsupportedType);
        assert!(
            error.message().contains("CAST(sum(x) AS BIGINT)"),
            "{error}"
        );
    }
}
