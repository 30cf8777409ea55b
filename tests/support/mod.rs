pub mod moto;
