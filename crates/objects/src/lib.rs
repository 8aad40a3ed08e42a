//! Where blobs that outlive a node live.
//!
//! One trait, [`ObjectStore`], and two backends: [`LocalStore`], a
//! directory on this machine (the default), and [`S3Store`], any
//! S3-compatible service. Both stream both ways (a 512 MiB upload never
//! sits in memory), and both commit an object only once its whole body
//! arrived: a body that fails or is cut off, or a `put` whose future is
//! dropped, leaves nothing behind (no object, no temporary file, no
//! unfinished multipart upload).
//!
//! Keys ([`Key`]) are relative, `/`-separated names checked once, so no
//! backend ever sees `..`, an absolute path or an empty segment.

mod error;
mod key;
mod local;
mod object;
mod s3;
#[cfg(test)]
mod suite;

pub use error::ObjectError;
pub use key::Key;
pub use local::LocalStore;
pub use object::{
    blocking_body, file_stream, put_bytes, read_to_vec, BodyWriter, ByteStream, Listed, Object,
    ObjectStore,
};
pub use s3::{S3Location, S3Settings, S3Store, PART_BYTES};
