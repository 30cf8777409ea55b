pub mod e2e;
pub mod moto;
