//! [`Params`]: the parameter lists a statement takes, and the [`params!`](crate::params) macro.

use crate::value::ToSql;

/// A statement's positional parameters, bound in order to `?1`, `?2`, …
pub trait Params {
    /// The parameters in order.
    fn each(&self) -> impl Iterator<Item = &dyn ToSql>;
}

impl Params for &[&dyn ToSql] {
    fn each(&self) -> impl Iterator<Item = &dyn ToSql> {
        self.iter().copied()
    }
}

impl Params for () {
    fn each(&self) -> impl Iterator<Item = &dyn ToSql> {
        std::iter::empty()
    }
}

/// `[]`: no parameters. (A separate impl, because `[T; 0]` could not name its `T`.)
impl Params for [&dyn ToSql; 0] {
    fn each(&self) -> impl Iterator<Item = &dyn ToSql> {
        std::iter::empty()
    }
}

/// Arrays of one type, `[&id]` or `[KIND_A, KIND_B]`, from 1 to 16 long.
macro_rules! arrays {
    ($($len:literal)+) => {$(
        impl<T: ToSql> Params for [T; $len] {
            fn each(&self) -> impl Iterator<Item = &dyn ToSql> {
                self.iter().map(|value| value as &dyn ToSql)
            }
        }
    )+};
}
arrays!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);

/// A parameter list of mixed types: `params![id, seq, payload]`.
#[macro_export]
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::ToSql]
    };
    ($($param:expr),+ $(,)?) => {
        &[$(&$param as &dyn $crate::ToSql),+] as &[&dyn $crate::ToSql]
    };
}
