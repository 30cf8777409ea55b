//! What the cluster says, translated into domain values: pure parsers that sit next to the
//! watches that feed them.

pub mod ca_status;
pub mod nth;
