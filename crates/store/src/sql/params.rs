//! Values a query is given: what each Rust type is as a parameter.

use shellgate_wire::MemoryLimit;

/// A query parameter, as both databases take it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Param<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a str),
}

/// A value that can be a query parameter.
pub(crate) trait ToParam {
    fn to_param(&self) -> Param<'_>;
}

impl ToParam for str {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}

impl ToParam for String {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}

impl<T: ToParam + ?Sized> ToParam for &T {
    fn to_param(&self) -> Param<'_> {
        (**self).to_param()
    }
}

impl<T: ToParam> ToParam for Option<T> {
    fn to_param(&self) -> Param<'_> {
        match self {
            Some(value) => value.to_param(),
            None => Param::Null,
        }
    }
}

impl ToParam for bool {
    fn to_param(&self) -> Param<'_> {
        Param::Integer(i64::from(*self))
    }
}

impl ToParam for f64 {
    fn to_param(&self) -> Param<'_> {
        Param::Real(*self)
    }
}

macro_rules! integer_param {
    ($($t:ty),*) => {$(
        impl ToParam for $t {
            fn to_param(&self) -> Param<'_> {
                // A count or a size beyond i64 is stored as the largest
                // integer both databases hold, never wrapped negative.
                Param::Integer(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}

integer_param!(i64, i32, u16, u32, u64, usize);

impl ToParam for MemoryLimit {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self.as_str())
    }
}
