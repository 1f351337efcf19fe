pub mod adapt;
pub mod bench;
pub mod bench_scaling;
pub mod derive;
pub mod generate;
pub mod models;
pub mod scaling;
pub mod tau;
