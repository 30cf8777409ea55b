pub mod apiserver;
pub mod aws_fleet;
pub mod aws_loopback;
pub mod e2e;
pub mod iam;
pub mod moto;
pub mod recording_proxy;
pub mod tools;
