//! Loops that take a view of the cluster, call the core, and execute its decisions through the
//! ports. Nothing here decides; nothing here sees an SDK type.

pub mod scaler;
