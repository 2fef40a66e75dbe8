//! [`Value`], what a parameter binds and a column holds, and the conversions to and from Rust
//! types ([`ToSql`], [`FromSql`]).

use std::borrow::Cow;

/// One SQL value, in the storage classes both backends share. Timestamps and JSON travel as
/// text (RFC 3339 UTC with milliseconds, and the JSON's own bytes); a backend with richer
/// column types converts at its edge.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// SQL `NULL`.
    Null,
    /// A 64-bit signed integer (flags are 0 or 1).
    Integer(i64),
    /// A 64-bit float.
    Real(f64),
    /// UTF-8 text.
    Text(Cow<'a, str>),
    /// Bytes.
    Blob(Cow<'a, [u8]>),
}

impl Value<'_> {
    /// The value with its borrowed text or bytes copied, so that it outlives the row.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Null => Value::Null,
            Value::Integer(number) => Value::Integer(number),
            Value::Real(number) => Value::Real(number),
            Value::Text(text) => Value::Text(Cow::Owned(text.into_owned())),
            Value::Blob(bytes) => Value::Blob(Cow::Owned(bytes.into_owned())),
        }
    }

    /// The storage class's name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Integer(_) => "INTEGER",
            Value::Real(_) => "REAL",
            Value::Text(_) => "TEXT",
            Value::Blob(_) => "BLOB",
        }
    }

    /// The text, or an error naming what the value is instead.
    pub fn as_str(&self) -> Result<&str, FromSqlError> {
        match self {
            Value::Text(text) => Ok(text),
            other => Err(FromSqlError::InvalidType {
                expected: "TEXT",
                found: other.kind(),
            }),
        }
    }

    /// The text, `None` for `NULL`, or an error naming what the value is instead.
    pub fn as_str_or_null(&self) -> Result<Option<&str>, FromSqlError> {
        match self {
            Value::Null => Ok(None),
            other => other.as_str().map(Some),
        }
    }
}

/// Why a column's value could not become the Rust type asked for.
#[derive(Debug, thiserror::Error)]
pub enum FromSqlError {
    /// The value's storage class is not one the type reads.
    #[error("expected {expected}, found {found}")]
    InvalidType {
        /// The storage class the type reads.
        expected: &'static str,
        /// The storage class the column held.
        found: &'static str,
    },
    /// An integer that does not fit the type.
    #[error("{0} is out of range for the type")]
    OutOfRange(i64),
    /// The type's own parser refused the value.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// A Rust value that binds as a statement parameter.
pub trait ToSql {
    /// The value to bind, borrowing from `self` where it can.
    ///
    /// # Errors
    /// A value that has no SQL form (an unsigned integer past `i64::MAX`).
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError>;
}

/// A Rust value with no SQL form.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ToSqlError(pub String);

/// A Rust type read out of a column.
pub trait FromSql: Sized {
    /// Converts the column's value.
    ///
    /// # Errors
    /// A value of another storage class, or out of the type's range.
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError>;
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        (**self).to_sql()
    }
}

impl<T: ToSql> ToSql for Option<T> {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        match self {
            Some(value) => value.to_sql(),
            None => Ok(Value::Null),
        }
    }
}

impl ToSql for Value<'_> {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        Ok(match self {
            Value::Text(text) => Value::Text(Cow::Borrowed(text)),
            Value::Blob(bytes) => Value::Blob(Cow::Borrowed(bytes)),
            Value::Null => Value::Null,
            Value::Integer(number) => Value::Integer(*number),
            Value::Real(number) => Value::Real(*number),
        })
    }
}

impl ToSql for str {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        Ok(Value::Text(Cow::Borrowed(self)))
    }
}

impl ToSql for String {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        Ok(Value::Text(Cow::Borrowed(self)))
    }
}

impl ToSql for [u8] {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        Ok(Value::Blob(Cow::Borrowed(self)))
    }
}

impl ToSql for Vec<u8> {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        Ok(Value::Blob(Cow::Borrowed(self)))
    }
}

impl ToSql for bool {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        Ok(Value::Integer(i64::from(*self)))
    }
}

impl ToSql for f64 {
    fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
        Ok(Value::Real(*self))
    }
}

/// Integers that always fit an `i64`.
macro_rules! lossless_integers {
    ($($int:ty),+) => {$(
        impl ToSql for $int {
            fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
                Ok(Value::Integer(i64::from(*self)))
            }
        }
    )+};
}
lossless_integers!(i8, i16, i32, i64, u8, u16, u32);

/// Integers that may not fit an `i64`: binding one that does not is an error, not a wrap.
macro_rules! checked_integers {
    ($($int:ty),+) => {$(
        impl ToSql for $int {
            fn to_sql(&self) -> Result<Value<'_>, ToSqlError> {
                i64::try_from(*self).map(Value::Integer).map_err(|_| {
                    ToSqlError(format!("{} does not fit a 64-bit signed integer", self))
                })
            }
        }
    )+};
}
checked_integers!(u64, usize, isize);

impl FromSql for Value<'static> {
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
        Ok(value.into_owned())
    }
}

impl<T: FromSql> FromSql for Option<T> {
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
        match value {
            Value::Null => Ok(None),
            other => T::from_sql(other).map(Some),
        }
    }
}

impl FromSql for String {
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
        value.as_str().map(str::to_owned)
    }
}

impl FromSql for Vec<u8> {
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
        match value {
            Value::Blob(bytes) => Ok(bytes.into_owned()),
            Value::Text(text) => Ok(text.into_owned().into_bytes()),
            other => Err(FromSqlError::InvalidType {
                expected: "BLOB",
                found: other.kind(),
            }),
        }
    }
}

impl FromSql for f64 {
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
        match value {
            Value::Real(number) => Ok(number),
            Value::Integer(number) => Ok(number as f64),
            other => Err(FromSqlError::InvalidType {
                expected: "REAL",
                found: other.kind(),
            }),
        }
    }
}

impl FromSql for bool {
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
        i64::from_sql(value).map(|number| number != 0)
    }
}

impl FromSql for i64 {
    fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
        match value {
            Value::Integer(number) => Ok(number),
            other => Err(FromSqlError::InvalidType {
                expected: "INTEGER",
                found: other.kind(),
            }),
        }
    }
}

/// Integers read through `i64`, refusing a value out of their range.
macro_rules! narrow_integers {
    ($($int:ty),+) => {$(
        impl FromSql for $int {
            fn from_sql(value: Value<'_>) -> Result<Self, FromSqlError> {
                let number = i64::from_sql(value)?;
                <$int>::try_from(number).map_err(|_| FromSqlError::OutOfRange(number))
            }
        }
    )+};
}
narrow_integers!(i8, i16, i32, u8, u16, u32, u64, usize, isize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_out_of_range_are_errors_not_wraps() {
        assert!(u64::MAX.to_sql().is_err());
        assert!(matches!(
            u32::from_sql(Value::Integer(-1)),
            Err(FromSqlError::OutOfRange(-1))
        ));
        assert_eq!(u32::from_sql(Value::Integer(7)).unwrap(), 7);
    }

    #[test]
    fn null_reads_as_none_and_text_is_not_an_integer() {
        assert_eq!(Option::<i64>::from_sql(Value::Null).unwrap(), None);
        assert!(matches!(
            i64::from_sql(Value::Text("1".into())),
            Err(FromSqlError::InvalidType {
                expected: "INTEGER",
                found: "TEXT"
            })
        ));
    }
}
