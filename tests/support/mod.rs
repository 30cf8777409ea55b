pub mod e2e;
pub mod moto;
pub mod tools;
