//! Kubernetes: the client and its connection modes, the watches that feed the cluster view, the
//! adapters that write (evictions, cordons, annotations, Events, the ledger, the Lease), and the
//! pure parsers that turn what the cluster says into domain values.

pub mod budget;
pub mod ca_status;
pub mod client;
pub mod convert;
pub mod events;
pub mod leader;
pub mod ledger;
pub mod nth;
pub mod retry;
pub mod watch;
pub mod writes;
